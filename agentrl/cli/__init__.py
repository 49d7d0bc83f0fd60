"""The `agentrl` command line. Each subcommand lives in its own module with `add_parser`.

A subcommand module exposes `add_parser(subparsers)` that registers its parser and sets
`func`, a handler taking the parsed args and returning the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Any

from rich_argparse import RichHelpFormatter

# (module, attribute): modules are imported only to build the parser; heavy imports stay in
# handlers so `agentrl envs list` starts fast.
SUBCOMMANDS = [
    "agentrl.cli.envs",
    "agentrl.cli.config",
    "agentrl.cli.train",
    "agentrl.cli.sft",
    "agentrl.cli.selfplay",
    "agentrl.cli.view",
    "agentrl.cli.runs",
    "agentrl.cli.export",
    "agentrl.cli.doctor",
    "agentrl.cli.rollout",
    "agentrl.cli.serve",
    "agentrl.sandboxes.cli",
]


class Parser(argparse.ArgumentParser):
    """No prefix matching of long options (`allow_abbrev=False`): with it `doctor --env X`
    was read as `--env-module X`. Subparsers are built with the parent's class, so every
    subcommand gets the same rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="agentrl",
        description="Reinforcement learning for tool-calling LLM agents.",
        formatter_class=RichHelpFormatter,
    )
    from agentrl import __version__

    parser.add_argument("--version", action="version", version=f"agentrl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def show_info_lines() -> None:
    """Print the `agentrl` loggers' INFO lines on stderr. They are the few lines that say
    which path a component took (vLLM: the native RL API or the fallback), which a user
    must see; without a handler Python prints only warnings. Idempotent; a program that
    configured logging itself (its root logger or `agentrl`'s has a handler: pytest's too)
    keeps its own, and nothing is printed twice."""
    ours = logging.getLogger("agentrl")
    if ours.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("agentrl: %(message)s"))
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 ok, 1 the command ran and failed, 2 usage or config error (one line on
    stderr naming the culprit, raised before any model loads), 130 interrupted."""
    from agentrl.config import ConfigError
    from agentrl.rows import DatasetError

    args = build_parser().parse_args(argv)
    show_info_lines()
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"agentrl {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except DatasetError as e:  # a bad row: file, row and column, not a traceback
        print(f"agentrl {args.command}: dataset error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # one line, not a traceback (`train` says which step)
        print(f"\nagentrl {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
