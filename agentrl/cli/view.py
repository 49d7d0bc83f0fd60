"""`agentrl view TRAJ.jsonl`: write a self-contained HTML report of trajectories.

agentrl view runs/x/rollouts/step_10.jsonl --tokenizer tiny:qwen2
agentrl view --diff rollouts.jsonl --tokenizer /ckpt/model --fail-on-drift
"""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="token-level HTML report of a trajectory file",
        description="Write a static HTML page (no network needed) showing every episode's "
        "tokens coloured by loss mask, logprobs/IS ratios on hover, tool calls and results.",
        formatter_class=RichHelpFormatter,
    )
    p.add_argument("path", help="trajectory JSONL (agentrl.types.write_jsonl format)")
    p.add_argument("--out", "-o", help="output HTML (default: next to the input)")
    p.add_argument(
        "--tokenizer",
        help="tokenizer dir or tiny:<preset> to decode ids (default: from trajectory metadata)",
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="also diff the trained ids against a chat-template re-render of the messages",
    )
    p.add_argument("--limit", type=int, help="only the first N episodes")
    p.add_argument(
        "--fail-on-drift", action="store_true", help="with --diff: exit 1 if any episode drifts"
    )
    p.add_argument("--cache-dir", help="where tiny tokenizers are built (default ~/.cache/agentrl)")
    p.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrl.viewer import write_view

    console = Console()
    try:
        res = write_view(
            args.path,
            args.out,
            tokenizer_path=args.tokenizer,
            diff=args.diff,
            limit=args.limit,
            cache_dir=args.cache_dir,
        )
    except (OSError, ValueError) as e:
        console.print(f"[red]agentrl view:[/] {e}")
        return 2
    s = res.summary
    console.print(
        f"wrote [bold]{res.out}[/] · {res.episodes} episodes · mean reward "
        f"{s['mean_reward']:.3f} · {s['trained_tokens']} trained / {s['env_tokens']} env tokens"
        + ("" if res.tokenizer else " · [yellow]no tokenizer: ids shown[/]")
    )
    if not args.diff:
        return 0
    drifted = [r for r in res.records if r.get("diff", {}).get("status") in ("drift", "error")]
    if not drifted:
        console.print("[green]no template drift[/]: re-rendering the messages reproduces the ids")
        return 0
    table = Table("episode", "status", "first divergence", "where", title="template drift")
    for r in drifted[:30]:
        d = r["diff"]
        first = "" if d["first"] is None else str(d["first"])
        table.add_row(str(r["i"]), d["status"], first, d["where"] or d["error"])
    console.print(table)
    console.print(
        f"[red]{len(drifted)}[/] of {res.episodes} episodes would retokenize differently; "
        "open the report and use 'drift only'."
    )
    return 1 if args.fail_on_drift else 0
