"""`agentrl train`: RL on an env, from a YAML recipe plus `key=value` overrides."""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter

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
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.set_defaults(func=cmd_train)


def resolve_config(args: argparse.Namespace) -> object:
    """Config file (or the packaged quickstart) + --env + overrides, validated."""
    from pathlib import Path

    from agentrl.config import TrainConfig, load_config

    path = args.config
    if path is None:
        import importlib.resources

        path = str(importlib.resources.files("agentrl.configs") / Path(DEFAULT_CONFIG).name)
    overrides = list(args.overrides)
    if args.env:
        overrides.append(f"data.env={args.env}")
    cfg = load_config(TrainConfig, path, overrides)
    # Every process that builds envs (Ray workers too) imports these; paths made absolute.
    cfg.data.env_modules += [str(Path(m).resolve()) for m in args.env_module]
    return cfg


def cmd_train(args: argparse.Namespace) -> int:
    from agentrl.config import ConfigError
    from agentrl.envs import load_env_module

    for m in args.env_module:
        load_env_module(m)
    try:
        cfg = resolve_config(args)
    except ConfigError as e:
        print(f"config error: {e}")
        return 2
    from agentrl.rows import DatasetError
    from agentrl.trainer import Trainer

    try:
        trainer = Trainer(cfg)
    except DatasetError as e:  # a bad row: file, row and column, not a traceback
        print(f"dataset error: {e}")
        return 2
    result = trainer.train(resume=args.resume)
    return 0 if result is not None else 1
