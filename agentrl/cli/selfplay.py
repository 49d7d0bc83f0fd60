"""`agentrl selfplay`: self-play fine-tuning (SPIN, SPPO) from a YAML recipe.

The config is a `TrainConfig` plus a `selfplay:` section (see `agentrl.recipes.config`);
`selfplay.method` picks the recipe. A separate command rather than a `TrainConfig` field
because these recipes have their own loop (iterations against a frozen previous iterate), not
the RL trainer's rollout → advantage → PPO step.
"""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "selfplay",
        help="self-play fine-tuning: SPIN or SPPO",
        formatter_class=RichHelpFormatter,
        description="Run a self-play recipe. Example: agentrl selfplay --config "
        "configs/selfplay/spin-cpu.yaml selfplay.iterations=3",
    )
    p.add_argument("--config", help="YAML: a train config plus a selfplay: section")
    p.add_argument("--method", choices=["spin", "sppo"], help="same as selfplay.method=")
    p.add_argument("--env", help="env id (same as data.env=ID)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.set_defaults(func=cmd_selfplay)


def cmd_selfplay(args: argparse.Namespace) -> int:
    from agentrl.assembly.validate import load_train_config
    from agentrl.recipes import SelfPlayTrainConfig, run_selfplay

    overrides = list(args.overrides)
    if args.method:
        overrides.append(f"selfplay.method={args.method}")
    if args.env:
        overrides.append(f"data.env={args.env}")
    cfg = load_train_config(args.config, overrides, cls=SelfPlayTrainConfig, local_files=True)
    from agentrl.trainer import run_dir

    cfg.trainer.out_dir = str(run_dir.resolve(cfg.trainer.out_dir, cfg.data.env))
    run_selfplay(cfg)
    print(f"final iterate: {cfg.trainer.out_dir}/final (use as model.path)")
    return 0
