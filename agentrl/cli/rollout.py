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

if TYPE_CHECKING:
    from agentrl.chat import ChatFormat
    from agentrl.engines import Engine


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout",
        help="sample episodes from an env and write trajectories",
        formatter_class=RichHelpFormatter,
    )
    p.add_argument("--env", required=True, help="env id, e.g. math/calc-v0")
    p.add_argument("--model", required=True, help="checkpoint dir or tiny:<preset>")
    p.add_argument("--n", type=int, default=4, help="samples per task (group size)")
    p.add_argument("--episodes", type=int, default=8, help="tasks (seeds), each sampled n times")
    p.add_argument("--seed", type=int, default=0, help="first task seed (with --data: row)")
    p.add_argument(
        "--data", action="append", default=[], help="dataset file/folder whose rows are the tasks"
    )
    p.add_argument("--out", default="trajectories.jsonl", help="output JSONL path")
    p.add_argument(
        "--max-turns", type=int, default=None, help="turn limit (default: the env's max_turns)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="per-turn budget")
    p.add_argument("--max-total-tokens", type=int, default=2048, help="whole-episode budget")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64, help="episodes in flight")
    p.add_argument("--timeout", type=float, default=120.0, help="episode wall-clock limit (s)")
    p.add_argument("--tool-format", default="auto", choices=["auto", "hermes", "llama3"])
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument("--env-module", action="append", default=[], help="also load this env file")
    p.set_defaults(func=cmd_rollout)


def load_engine(
    model_path: str,
    device: str | None = None,
    max_batch_size: int = 64,
    fast: Literal["auto"] | bool = "auto",
) -> tuple[Engine, ChatFormat]:
    """(engine, ChatFormat) for a checkpoint path or `tiny:<preset>`, loaded and built the way
    `agentrl train` does (`agentrl.models.load`, `agentrl.engines.build_engine`): the hf
    engine, its CUDA fast path where it applies unless `fast=False`; bfloat16 on CUDA."""
    import torch

    from agentrl.chat import ChatFormat
    from agentrl.config import EngineConfig, FastHFTuning, HFEngineConfig, ModelConfig
    from agentrl.engines import build_engine
    from agentrl.models.load import load_model, load_tokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model_cfg = ModelConfig(path=model_path)
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


def cmd_rollout(args: argparse.Namespace) -> int:
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
    if args.env not in registry and ":" not in args.env:  # prefixed ids: other stacks' envs
        from agentrl.config.validate import unknown_name

        raise unknown_name("--env", args.env, registry, "env id", "agentrl rollout")
    make(args.env).close()  # fail fast on a bad id, before loading the model
    tasks: list = list(range(args.seed, args.seed + args.episodes))
    if args.data:  # rows, checked by the env class like data.path (docs/datasets.md)
        from agentrl.rows import read_dataset, rows_env

        ds = read_dataset(args.data, check=rows_env(args.env).read_row)
        tasks = ds.rows[args.seed : args.seed + args.episodes]
    console = Console(stderr=True)
    engine, chat = load_engine(args.model, args.device, max_batch_size=args.concurrency)
    rollout = RolloutConfig(
        n=args.n,
        max_turns=args.max_turns,
        max_total_tokens=args.max_total_tokens,
        episode_timeout_s=args.timeout,
        concurrency=args.concurrency,
        tool_format=args.tool_format,
    )
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    total = len(tasks) * args.n
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(f"{args.env}", total=total)
        runner = RolloutRunner(
            engine,
            chat,
            lambda: make(args.env),
            rollout,
            sampling,
            on_episode=lambda _t: progress.advance(bar),
        )
        groups = runner.collect_sync(tasks, args.n)
        runner.close(close_engine=True)
    trajs = [t for g in groups for t in g.trajectories]
    tokenizer = tokenizer_ref(args.model)
    for t in trajs:  # `agentrl view traj.jsonl` decodes ids with it (viewer TOKENIZER_KEYS)
        t.metadata.setdefault("tokenizer", tokenizer)
    n = write_jsonl(args.out, trajs)
    stats = runner.last_stats
    terms = ", ".join(
        f"{k.split('/')[1]} {v:.0%}" for k, v in stats.items() if k.startswith("termination/")
    )
    console.print(
        f"wrote {n} trajectories to {args.out}: reward {stats['reward_mean']:.3f}, "
        f"turns {stats['turns_mean']:.2f}, {terms}, {stats['wall_s']:.1f}s"
    )
    return 0
