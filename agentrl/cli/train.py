"""`agentrl train`: RL on an env, from a YAML recipe plus `key=value` overrides."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich_argparse import RichHelpFormatter

if TYPE_CHECKING:
    from agentrl.config import TrainConfig

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
        "against an in-process gateway (rollout.harness.agent; turns data.eval_episodes "
        "off unless set)",
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


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """Config file (or the packaged quickstart) + --env + overrides, validated; `--env-module`
    files are imported first (so `data.env` can name their envs)."""
    from pathlib import Path

    from agentrl.assembly.validate import load_train_config
    from agentrl.cli._common import load_env_modules

    load_env_modules(args.env_module)
    path = args.config if args.config is not None else default_config_path()
    overrides = list(args.overrides)
    if args.env:
        overrides.append(f"data.env={args.env}")
    overrides = agent_overrides(args) + overrides
    cfg = load_train_config(path, overrides, local_files=True)
    # Every process that builds envs (Ray workers too) imports these; paths made absolute.
    cfg.data.env_modules += [str(Path(m).resolve()) for m in args.env_module]
    return cfg


def agent_overrides(args: argparse.Namespace) -> list[str]:
    """`--agent` / `--agent-command` as overrides, put before the user's (theirs win): the
    held-out eval runs the built-in env loop, not the agent, so it is off by default."""
    import json
    import shlex

    out = []
    if args.agent:
        out.append(f"rollout.harness.agent={args.agent}")
    if args.agent_command:
        out.append(f"rollout.harness.command={json.dumps(shlex.split(args.agent_command))}")
    return out + ["data.eval_episodes=0"] if out else []


def cmd_train(args: argparse.Namespace) -> int:
    """Config errors and a refused run folder are raised (exit 2) before any model loads."""
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
    if args.resume and not fresh:  # before the run rewrites config.yaml with the new values
        import sys

        warning = run_dir.resume_warning(run_dir.resume_changes(out, cfg))
        if warning:
            print(warning, file=sys.stderr, flush=True)
    from agentrl.assembly import build_trainer

    result = build_trainer(cfg).train(resume=args.resume, overwrite=args.overwrite)
    return 0 if result is not None else 1
