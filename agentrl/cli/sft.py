"""`agentrl sft --env ID [--steps N] [--out DIR] [key=value ...]`: supervised fine-tuning on an
env's oracle demonstrations, saved as an HF checkpoint directory.

The output (config, weights, tokenizer with its chat template) is what `model.path` takes, so
`agentrl sft --env math/calc-v0 --out runs/sft-calc` followed by
`agentrl train model.path=runs/sft-calc` starts RL from the supervised model. Demos are
token-exact episodes of the env's oracle (see `agentrl.trainer.sft`). Model, LoRA and `sft.*`
settings come from `--config` / overrides like any train run.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich_argparse import RichHelpFormatter

if TYPE_CHECKING:
    from agentrl.config import TrainConfig


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft",
        help="supervised fine-tuning on an env's oracle demos; saves an HF checkpoint",
        formatter_class=RichHelpFormatter,
        description="SFT on oracle demonstrations. Example: agentrl sft --env math/calc-easy-v0 "
        "--steps 200 --out runs/sft-calc model.path=tiny:qwen2",
    )
    p.add_argument("--config", help="YAML train config (model.*, sft.*, data.* are used)")
    p.add_argument("--env", help="env id with an oracle (same as data.env=ID)")
    p.add_argument("--env-module", action="append", default=[], help="load a user env file")
    p.add_argument("--steps", type=int, help="optimizer steps (same as sft.steps=N)")
    p.add_argument("--out", default="runs/sft", help="checkpoint directory to write")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.set_defaults(func=cmd_sft)


def cmd_sft(args: argparse.Namespace) -> int:
    from agentrl.assembly.validate import load_train_config
    from agentrl.cli._common import load_env_modules
    from agentrl.config import ConfigError

    load_env_modules(args.env_module)
    overrides = list(args.overrides)
    if args.env:
        overrides.append(f"data.env={args.env}")
    if args.steps is not None:
        overrides.append(f"sft.steps={args.steps}")
    cfg = load_train_config(args.config, overrides, local_files=True)
    if cfg.sft.steps <= 0:
        raise ConfigError("sft.steps must be > 0 (pass --steps N)")
    out = run_sft(cfg, args.out)
    print(f"saved {out} (use as model.path={out})")
    return 0


def run_sft(cfg: TrainConfig, out: str) -> object:
    """Demos → SFT → HF checkpoint at `out`; also writes `sft.jsonl` (loss per step) there."""
    import json
    from pathlib import Path

    import torch

    from agentrl.assembly import env_factory, seed_everything
    from agentrl.chat import ChatFormat
    from agentrl.models.load import load_model, load_tokenizer, save_pretrained
    from agentrl.trainer.data import TaskSource
    from agentrl.trainer.sft import build_demos, sft_train

    seed_everything(cfg.trainer.seed)
    device_name = cfg.trainer.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_name)
    from agentrl.trainer.threads import apply_cpu_threads

    apply_cpu_threads(cfg.trainer.cpu_threads, device)
    tokenizer = load_tokenizer(cfg.model)
    model = load_model(cfg.model).to(device)
    chat = ChatFormat(tokenizer, cfg.rollout.tool_format)
    items = TaskSource(cfg.data, cfg.trainer.seed).demo_items(cfg.sft.demos)
    demos = build_demos(env_factory(cfg), chat, items, cfg.sft.skip_tools)
    from rich.console import Console

    from agentrl.report.progress import RunProgress

    progress = RunProgress(Console())
    with progress.task("sft", cfg.sft.steps) as bar:
        losses = sft_train(
            model,
            demos,
            cfg.sft,
            tokenizer.pad_token_id,
            device,
            cfg.trainer.seed,
            log=lambda _step, loss: bar.advance(status=f"loss {loss:.3f}"),
        )
    path = save_pretrained(model, tokenizer, out)
    with open(Path(path) / "sft.jsonl", "w", encoding="utf-8") as f:
        for step, loss in enumerate(losses, 1):
            f.write(json.dumps({"step": step, "loss": loss}) + "\n")
    print(f"sft: {len(demos)} demos, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return path
