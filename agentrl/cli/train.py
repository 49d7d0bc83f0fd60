"""`agentrl train`: RL on an env, from a YAML recipe plus `key=value` overrides."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich_argparse import RichHelpFormatter

from agentrl.cli._stop import sigterm_as_ctrl_c, stop_code, unstoppable

if TYPE_CHECKING:
    from pathlib import Path

    from agentrl.config import TrainConfig
    from agentrl.trainer.trainer import Trainer

DEFAULT_CONFIG = "configs/quickstart-cpu.yaml"  # shipped as agentrl/configs/ too


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a policy with RL (GRPO/PPO family)",
        formatter_class=RichHelpFormatter,
        description="Train with RL. Example: agentrl train --config configs/quickstart-cpu.yaml "
        "trainer.steps=20",
    )
    p.add_argument("--config", help="YAML recipe (default: the CPU quickstart)")
    p.add_argument("--env", help="env id (same as data.env=ID)")
    p.add_argument("--env-module", action="append", default=[], help="load a user env file")
    p.add_argument(
        "--agent",
        metavar="MODULE:FUNCTION",
        help="train an agent program, unchanged: FUNCTION(task, base_url) runs each episode "
        "against an in-process gateway (rollout.harness.agent); the held-out eval runs it too; "
        "no SFT",
    )
    p.add_argument(
        "--agent-command",
        metavar="CMDLINE",
        help="the same with a command line, OPENAI_BASE_URL etc. pointing at the episode's "
        "session (rollout.harness.command)",
    )
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the previous run in trainer.out_dir (default: refuse, or with the "
        "default runs/{env} template, use the next free numbered folder)",
    )
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.set_defaults(func=cmd_train)


def default_config_path() -> str:
    """The config `agentrl train` runs without `--config`: the packaged CPU quickstart
    (`config show` without a file shows it too)."""
    import importlib.resources
    from pathlib import Path

    return str(importlib.resources.files("agentrl.configs") / Path(DEFAULT_CONFIG).name)


def resolve_config(args: argparse.Namespace, path: str | None = None) -> TrainConfig:
    """Config file (or the packaged quickstart; `path` replaces both) + --env + overrides,
    validated; `--env-module` files are imported first (so `data.env` can name their envs)."""
    from pathlib import Path

    from agentrl.assembly.validate import load_train_config
    from agentrl.cli._common import load_env_modules

    load_env_modules(args.env_module)
    if path is None:
        path = args.config if args.config is not None else default_config_path()
    overrides = list(args.overrides)
    if args.env:
        overrides.append(f"data.env={args.env}")
    overrides = agent_overrides(args) + overrides
    cfg = load_train_config(path, overrides, local_files=True)
    # Every process that builds envs (Ray workers too) imports these; paths made absolute.
    mods = [str(Path(m).resolve()) for m in args.env_module]
    cfg.data.env_modules += [m for m in mods if m not in cfg.data.env_modules]
    return cfg


def resumed_config(args: argparse.Namespace, out: Path, given: TrainConfig) -> TrainConfig:
    """`--resume`: the run's own `config.yaml` with the command line's overrides on top (not
    the recipe's or the quickstart's values: a 12-step run must not become a 30-step one).
    Prints every key that differs from the saved config, and the keys of a `--config` file
    that differ from it (not applied)."""
    import sys

    from agentrl.trainer import run_dir

    saved = out / "config.yaml"
    if not saved.exists():
        return given
    cfg = resolve_config(args, str(saved))
    cfg.trainer.out_dir = str(out)
    diff = run_dir.resume_diff(out, cfg)
    print(f"--resume: the run's own config ({saved}), command-line overrides on top", flush=True)
    for key, old, new in diff:
        print(f"  {key}: {old} -> {new}", flush=True)
    if args.config is not None:
        plain = argparse.Namespace(**{**vars(args), "overrides": [], "env": None})
        ignored = [k for k, _, _ in run_dir.resume_diff(out, resolve_config(plain))]
        if ignored:
            print(
                f"  not applied from {args.config} (differs from the run's config): "
                f"{', '.join(ignored)}; pass key=value to change one",
                flush=True,
            )
    warning = run_dir.resume_warning([k for k, _, _ in diff])
    if warning and "overrides" in warning:
        print(warning, file=sys.stderr, flush=True)
    return cfg


def interrupted(trainer: Trainer) -> None:
    """Ctrl-C: one line, and a checkpoint when the step in progress had finished (its metrics
    row is written) and is not saved yet. A second Ctrl-C or SIGTERM while it saves is
    ignored."""
    import json
    import sys

    step, saved = trainer.step, trainer.checkpointer.latest()
    finished = 0
    try:
        rows = trainer.logger.path.read_text(encoding="utf-8").splitlines()
        finished = json.loads(rows[-1])["step"] if rows else 0
    except (OSError, ValueError, KeyError):
        pass
    done = max(step if finished == step else step - 1, 0)
    if done > 0 and done == step and (saved is None or saved.name != f"step_{step:06d}"):
        with unstoppable():
            trainer.save_checkpoint()
    latest = trainer.checkpointer.latest()
    if latest is None:
        print(f"\ninterrupted at step {done}; no checkpoint yet (start again)", file=sys.stderr)
        return
    ckpt = int(latest.name.removeprefix("step_"))
    where = "" if ckpt == done else f" (from the checkpoint of step {ckpt})"
    print(f"\ninterrupted at step {done}; resume with --resume{where}", file=sys.stderr)


def agent_overrides(args: argparse.Namespace) -> list[str]:
    """`--agent` / `--agent-command` as overrides, put before the user's (theirs win). SFT
    is off: its oracle demos are the env's own format, which the agent program never shows
    the model (a harness run refuses `sft.steps > 0`)."""
    import json
    import shlex

    out = []
    if args.agent:
        out.append(f"rollout.harness.agent={args.agent}")
    if args.agent_command:
        out.append(f"rollout.harness.command={json.dumps(shlex.split(args.agent_command))}")
    return out + ["sft.steps=0"] if out else []


def cmd_train(args: argparse.Namespace) -> int:
    """Config errors and a refused run folder are raised (exit 2) before any model loads.
    Ctrl-C: one line, a checkpoint if the step finished, exit 130 (`interrupted`); SIGTERM
    the same, exit 143."""
    if args.resume and args.overwrite:
        from agentrl.config import ConfigError

        raise ConfigError("--resume and --overwrite contradict each other; pass one")
    cfg = resolve_config(args)
    from agentrl.trainer import run_dir

    out = run_dir.resolve(
        cfg.trainer.out_dir, cfg.data.env, resume=args.resume, overwrite=args.overwrite
    )
    cfg.trainer.out_dir = str(out)
    fresh = args.resume and not run_dir.has_checkpoint(out)
    note = " (--resume: no checkpoint there yet, so a fresh run starts)" if fresh else ""
    print(f"run folder: {out}{note}", flush=True)
    from agentrl.cli._common import tiny_rows_warning

    if warning := tiny_rows_warning(cfg.model.path, bool(cfg.data.train_paths())):
        import sys

        print(warning, file=sys.stderr, flush=True)
    if args.resume and not fresh:  # before the run rewrites config.yaml with the new values
        cfg = resumed_config(args, out, cfg)
    from agentrl.assembly import build_trainer

    trainer = build_trainer(cfg)
    with sigterm_as_ctrl_c() as terminated:
        try:
            result = trainer.run(args.resume, args.overwrite)
        except KeyboardInterrupt:
            interrupted(trainer)
            return stop_code(terminated)
        finally:
            trainer.finish()
    if result is None:
        return 1
    final = out / "final"
    where = final if final.exists() else trainer.checkpointer.latest()
    if where is not None:
        print(f"final model: {where} (agentrl rollout --model {where} ...)", flush=True)
    return 0
