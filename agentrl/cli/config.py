"""`agentrl config show CONFIG [key=value ...]`: print the resolved, validated config."""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="inspect configs", formatter_class=RichHelpFormatter)
    s = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = s.add_parser("show", help="print the resolved config", formatter_class=RichHelpFormatter)
    show.add_argument("config", nargs="?", help="YAML file (defaults when omitted)")
    show.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    show.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    from agentrl.config import ConfigError, TrainConfig, dump_yaml, load_config

    path, overrides = args.config, list(args.overrides)
    if path and "=" in path:
        path, overrides = None, [path, *overrides]
    try:
        cfg = load_config(TrainConfig, path, overrides)
    except ConfigError as e:
        print(f"config error: {e}")
        return 2
    print(dump_yaml(cfg), end="")
    return 0
