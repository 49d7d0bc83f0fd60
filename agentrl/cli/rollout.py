"""`agentrl rollout`: sample episodes from an env with a model and write token-exact JSONL.

Each trajectory records the model it was sampled with as `metadata["tokenizer"]`, so
`agentrl view traj.jsonl` shows text without a `--tokenizer` flag.

agentrl rollout --env math/calc-v0 --model tiny:qwen2 --n 4 --episodes 8 --out traj.jsonl
agentrl rollout --env math/boxed-v0 --data test.parquet ...   # dataset rows as the tasks
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Literal

from rich_argparse import RichHelpFormatter

from agentrl.cli._stop import sigterm_as_ctrl_c, stop_code

if TYPE_CHECKING:
    from agentrl.chat import ChatFormat
    from agentrl.config import ModelConfig, TrainConfig
    from agentrl.engines import Engine
    from agentrl.types import Trajectory


# Without --config, these; with it, the recipe's values (a flag given still wins).
DEFAULTS = {
    "n": 4,
    "max_new_tokens": 64,
    "max_total_tokens": 2048,
    "temperature": 1.0,
    "tool_format": "auto",
    "max_turns": None,  # the env's own
    "timeout": None,  # `default_timeout`
}
# The episode clock leaves out the wait for an engine slot (hf engines) but counts an episode's
# own generation, and a batch shared by many episodes on a busy machine decodes each one about
# as slowly as the whole batch: the default timeout grows with the episodes in flight (per 8
# of them, this much), and is off for greedy evaluation.
TIMEOUT_PER_8_S = 120.0
NO_TIMEOUT_S = 24 * 3600.0
# More timed-out episodes than this fraction: the run is not a measurement; exit code 1.
TIMEOUT_FAIL_FRACTION = 0.5


def add_parser(sub: argparse._SubParsersAction) -> None:
    from agentrl.models.gguf import PRESETS as GGUF_PRESETS
    from agentrl.models.tiny import PRESETS as TINY_PRESETS

    p = sub.add_parser(
        "rollout",
        help="sample episodes from an env and write trajectories",
        formatter_class=RichHelpFormatter,
        description="Sample episodes and write token-exact JSONL. Example: agentrl rollout "
        "--config configs/smollm2-calc-cpu.yaml --episodes 32 --temperature 0",
    )
    p.add_argument(
        "--config",
        help="a training recipe: its model, env, env kwargs, sampling and rollout settings "
        "(flags given here win)",
    )
    p.add_argument("--env", help="env id, e.g. math/calc-v0 (required without --config)")
    real = ", ".join(sorted(GGUF_PRESETS))
    tiny = ", ".join(f"tiny:{k}" for k in sorted(TINY_PRESETS))
    p.add_argument(
        "--model",
        help=f"a checkpoint folder (a run's final/ or checkpoints/step_N/hf/), a real-model "
        f"preset ({real}), or a random-init test model ({tiny}); required without --config",
    )
    p.add_argument(
        "--env-kwargs",
        default=None,
        help="env constructor arguments as a JSON object, e.g. '{\"max_turns\": 6}' "
        "(merged over the recipe's data.env_kwargs)",
    )
    p.add_argument("--n", type=int, default=None, help="samples per task (default: 4)")
    p.add_argument(
        "--episodes", type=int, default=8, help="tasks (seeds), each sampled n times (default: 8)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="first task seed (with --data: row) (default: 0)"
    )
    p.add_argument(
        "--data", action="append", default=[], help="dataset file/folder whose rows are the tasks"
    )
    p.add_argument(
        "--out", default="trajectories.jsonl", help="output JSONL (default: trajectories.jsonl)"
    )
    p.add_argument(
        "--max-turns", type=int, default=None, help="turn limit (default: the env's max_turns)"
    )
    p.add_argument("--max-new-tokens", type=int, default=None, help="per-turn budget (default: 64)")
    p.add_argument(
        "--max-total-tokens", type=int, default=None, help="whole-episode budget (default: 2048)"
    )
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: 1.0)")
    p.add_argument("--concurrency", type=int, default=64, help="episodes in flight (default: 64)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"limit on an episode's own time in s, time queued for an engine slot not counted "
        f"(default: {TIMEOUT_PER_8_S:.0f} s per 8 episodes in flight; none when --temperature 0)",
    )
    p.add_argument(
        "--tool-format", default=None, choices=["auto", "hermes", "llama3"], help="(default: auto)"
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument("--env-module", action="append", default=[], help="also load this env file")
    p.set_defaults(func=cmd_rollout)


def load_engine(
    model_path: str,
    device: str | None = None,
    max_batch_size: int = 64,
    fast: Literal["auto"] | bool = "auto",
    model_cfg: ModelConfig | None = None,
) -> tuple[Engine, ChatFormat]:
    """(engine, ChatFormat) for a checkpoint path or `tiny:<preset>`, loaded and built the way
    `agentrl train` does (`agentrl.models.load`, `agentrl.engines.build_engine`): the hf
    engine, its CUDA fast path where it applies unless `fast=False`; bfloat16 on CUDA.
    `model_cfg`: a recipe's model section (its cache folder, dtype); `model_path` wins."""
    import torch

    from agentrl.chat import ChatFormat
    from agentrl.config import EngineConfig, FastHFTuning, HFEngineConfig, ModelConfig
    from agentrl.engines import build_engine
    from agentrl.models.load import load_model, load_tokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model_cfg = ModelConfig(path=model_path) if model_cfg is None else model_cfg
    model_cfg.path = model_path
    if device.startswith("cuda"):
        model_cfg.dtype = "bfloat16"
    tok = load_tokenizer(model_cfg)
    model = load_model(model_cfg, trainable=False)
    tuning = FastHFTuning(precapture=False)  # graphs are captured as requests need them
    hf = HFEngineConfig(fast=fast, device=device, tuning=tuning)
    engine = build_engine(EngineConfig(max_batch_size=max_batch_size, hf=hf), model, tok)
    return engine, ChatFormat(tok)


def tokenizer_ref(model: str) -> str:
    """What the trajectories record as their tokenizer: a local checkpoint as an absolute path
    (so the file can be viewed from another folder), anything else (`tiny:<preset>`, a hub
    id) as given."""
    from pathlib import Path

    local = Path(model).expanduser()
    return str(local.resolve()) if local.exists() else model


def settings(args: argparse.Namespace) -> tuple[TrainConfig | None, dict]:
    """The recipe (`--config`, validated like `agentrl train`'s) and the values this rollout
    uses: a flag given wins over the recipe, the recipe over `DEFAULTS`."""
    import json

    from agentrl.config import ConfigError

    cfg = None
    if args.config:
        from agentrl.assembly.validate import load_train_config

        cfg = load_train_config(args.config, local_files=True)
    recipe: dict = {}
    if cfg is not None:
        recipe = {
            "env": cfg.data.env,
            "model": cfg.model.path,
            "n": cfg.rollout.n,
            "max_turns": cfg.rollout.max_turns,
            "max_new_tokens": cfg.sampling.max_new_tokens,
            "max_total_tokens": cfg.rollout.max_total_tokens,
            "temperature": cfg.sampling.temperature,
            "tool_format": cfg.rollout.tool_format,
            "env_kwargs": dict(cfg.data.env_kwargs),
        }
    given = {k: v for k, v in vars(args).items() if v is not None}
    out = DEFAULTS | recipe | given
    for flag in ("env", "model"):
        if flag not in out:
            raise ConfigError(f"--{flag} is required (or --config RECIPE, which names one)")
    kwargs = dict(recipe.get("env_kwargs", {}))
    if args.env_kwargs:
        try:
            extra = json.loads(args.env_kwargs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--env-kwargs: not JSON ({e.msg}): {args.env_kwargs}") from None
        if not isinstance(extra, dict):
            raise ConfigError(f"--env-kwargs: a JSON object is needed, got {args.env_kwargs}")
        kwargs |= extra
    out["env_kwargs"] = kwargs
    return cfg, out


def default_timeout(temperature: float, in_flight: int) -> float:
    """`--timeout` when not given: off for greedy evaluation (a measurement, not a sampler to
    keep moving), else `TIMEOUT_PER_8_S` per 8 episodes in flight. The clock leaves out the
    time a request waits for an engine slot (the hf engine reports admission; vllm and sglang
    do not, so there it counts), but an episode's own generation in a batch shared by every
    episode in flight grows with their number. The wall time, queue included, stays bounded
    by `rollout.episode_wall_factor` times the timeout (docs/rollout.md, "The episode clock")."""
    if temperature == 0:
        return NO_TIMEOUT_S
    return TIMEOUT_PER_8_S * max(1.0, in_flight / 8)


def _row_ready(t: Trajectory, tokenizer: str) -> Trajectory:
    """The model it was sampled with (`agentrl view traj.jsonl` decodes ids with it, viewer
    TOKENIZER_KEYS) and `metadata["scored"]`: False for an episode the clock ended (its
    reward 0 is no score: leave it out of means)."""
    t.metadata.setdefault("tokenizer", tokenizer)
    t.metadata["scored"] = t.termination != "timeout"
    return t


def cmd_rollout(args: argparse.Namespace) -> int:
    """Exit 1 (and a first-line warning) when more than half the episodes timed out."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from agentrl.cli._common import load_env_modules
    from agentrl.config.schema import RolloutConfig, SamplingConfig
    from agentrl.envs import make, registry
    from agentrl.envs.registration import load_plugins
    from agentrl.rollout import RolloutRunner
    from agentrl.types import write_jsonl

    load_env_modules(args.env_module)
    load_plugins()
    cfg, v = settings(args)
    env_id, env_kwargs = v["env"], v["env_kwargs"]
    if env_id not in registry and ":" not in env_id:  # prefixed ids: other stacks' envs
        from agentrl.config.validate import unknown_name

        raise unknown_name("--env", env_id, registry, "env id", "agentrl rollout")
    try:
        make(env_id, **env_kwargs).close()  # fail fast on a bad id, before loading the model
    except TypeError as e:
        from agentrl.config import ConfigError

        raise ConfigError(f"--env-kwargs for {env_id}: {e}") from None
    tasks: list = list(range(args.seed, args.seed + args.episodes))
    if args.data:  # rows, checked by the env class like data.path (docs/datasets.md)
        from agentrl.rows import read_dataset, rows_env

        ds = read_dataset(args.data, check=rows_env(env_id).read_row)
        tasks = ds.rows[args.seed : args.seed + args.episodes]
    console = Console(stderr=True, soft_wrap=True)  # a log file gets whole lines
    from agentrl.cli._common import tiny_rows_warning

    if warning := tiny_rows_warning(v["model"], bool(args.data)):
        console.print(warning, style="yellow", markup=False, highlight=False)
    total = len(tasks) * v["n"]
    timeout = v.get("timeout") or default_timeout(v["temperature"], min(args.concurrency, total))
    model_cfg = None if cfg is None else cfg.model
    engine, chat = load_engine(
        v["model"], args.device, max_batch_size=args.concurrency, model_cfg=model_cfg
    )
    rollout = RolloutConfig(
        n=v["n"],
        max_turns=v["max_turns"],
        max_total_tokens=v["max_total_tokens"],
        episode_timeout_s=timeout,
        concurrency=args.concurrency,
        tool_format=v["tool_format"],
    )
    sampling = SamplingConfig(temperature=v["temperature"], max_new_tokens=v["max_new_tokens"])
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    tokenizer = tokenizer_ref(v["model"])
    with Progress(*columns, console=console) as progress, open(args.out, "w") as sink:
        bar = progress.add_task(f"{env_id}", total=total)

        def finished(t: Trajectory) -> None:  # its row now, so a stopped run keeps it
            sink.write(_row_ready(t, tokenizer).to_json() + "\n")
            sink.flush()
            progress.advance(bar)

        runner = RolloutRunner(
            engine, chat, lambda: make(env_id, **env_kwargs), rollout, sampling,
            on_episode=finished,
        )  # fmt: skip
        with sigterm_as_ctrl_c() as terminated:
            try:
                groups = runner.collect_sync(tasks, v["n"])
            except KeyboardInterrupt:
                done = int(progress.tasks[bar].completed)
                console.print(
                    f"interrupted: {done} of {total} episodes finished; their rows are in "
                    f"{args.out}, in the order they finished",
                    highlight=False,
                )
                return stop_code(terminated)
            finally:
                runner.close(close_engine=True)
    trajs = [t for g in groups for t in g.trajectories]
    timed_out = sum(t.termination == "timeout" for t in trajs)
    n = write_jsonl(args.out, (_row_ready(t, tokenizer) for t in trajs))  # in task order
    failed = bool(trajs) and timed_out / len(trajs) > TIMEOUT_FAIL_FRACTION
    if timed_out:
        limit = "none" if timeout >= NO_TIMEOUT_S else f"{timeout:g}s"
        console.print(
            f"[bold red]warning:[/] {timed_out} of {n} episodes timed out (--timeout {limit}, "
            f"{args.concurrency} in flight); their rows have metadata.scored=false and are "
            "left out of the reward below: raise --timeout or lower --concurrency",
            highlight=False,
        )
    scored = [t.reward for t in trajs if t.metadata["scored"]]
    stats = runner.last_stats
    terms = ", ".join(
        f"{k.split('/')[1]} {v:.0%}" for k, v in stats.items() if k.startswith("termination/")
    )
    reward = f"{sum(scored) / len(scored):.3f}" if scored else "n/a (nothing scored)"
    console.print(
        f"wrote {n} trajectories to {args.out}: reward {reward} over {len(scored)} scored, "
        f"turns {stats['turns_mean']:.2f}, {terms}, {stats['wall_s']:.1f}s",
        highlight=False,
    )
    return 1 if failed else 0
