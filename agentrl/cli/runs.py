"""`agentrl runs show|list|plot`: summarise training run folders (`metrics.jsonl`, `eval.jsonl`).

agentrl runs show runs/quickstart          # reward, eval, SFT loss, wall time by phase
agentrl runs plot runs/quickstart          # PNG curves into runs/quickstart/plots/
agentrl runs list runs/                    # one line per run folder under runs/
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs", help="summarise and plot run folders", formatter_class=RichHelpFormatter
    )
    s = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    show = s.add_parser("show", help="summary table of one run", formatter_class=RichHelpFormatter)
    show.add_argument("run_dir", help="folder holding metrics.jsonl")
    show.add_argument("--plots", action="store_true", help="also write PNG curves")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(func=cmd_show)
    plot = s.add_parser(
        "plot", help="write PNG curves of one run", formatter_class=RichHelpFormatter
    )
    plot.add_argument("run_dir")
    plot.add_argument("--out", help="output folder (default RUN_DIR/plots)")
    plot.set_defaults(func=cmd_plot)
    lst = s.add_parser(
        "list", help="one line per run under ROOT", formatter_class=RichHelpFormatter
    )
    lst.add_argument("root", nargs="?", default="runs")
    lst.set_defaults(func=cmd_list)


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _duration(s: float | None) -> str:
    if s is None:
        return "–"
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def _eval_keys(before: dict[str, float], after: dict[str, float]) -> list[str]:
    keys = [k for k in before if k != "step" and (k in after or not after)]
    preferred = [k for k in keys if "reward" in k or "success" in k or "pass" in k]
    return (preferred or keys)[:6]


def cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrl.report import METRICS_FILE, summarize, write_plots
    from agentrl.report.metrics import STALE_CUMULATIVE

    console = Console()
    run = Path(args.run_dir)
    if not (run / METRICS_FILE).exists():
        console.print(f"[red]agentrl runs show:[/] no {METRICS_FILE} in {run}")
        return 2
    try:
        s = summarize(run)
    except ValueError as e:
        console.print(f"[red]agentrl runs show:[/] {e}")
        return 2
    if args.json:
        d = dataclasses.asdict(s)
        d["run_dir"] = str(s.run_dir)
        print(json.dumps(d, indent=2))
        return 0
    table = Table(title=f"run {run}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("steps", f"{s.steps} (last step {_f(s.last_step, 0)})")
    if s.reward_key:
        key = s.reward_key
        table.add_row(f"{key} first → last", f"{_f(s.first_reward)} → {_f(s.last_reward)}")
        table.add_row(f"{key} best", f"{_f(s.best_reward)} at step {_f(s.best_step, 0)}")
    else:
        table.add_row("reward", "[yellow]no reward key logged[/]")
    if s.success_key:
        table.add_row(f"{s.success_key} (last)", _f(s.last_success))
    for k in _eval_keys(s.eval_untouched, {}):  # before the SFT bootstrap
        table.add_row(f"eval {k} untouched (before SFT)", _f(s.eval_untouched[k]))
    for k in _eval_keys(s.eval_before, s.eval_after):
        after = s.eval_after.get(k)
        before = s.eval_before[k]
        delta = "" if after is None else f"  ({after - before:+.3f})"
        table.add_row(f"eval {k} before → after", f"{_f(before)} → {_f(after)}{delta}")
    if s.sft_loss_first is not None:
        steps = f" ({s.sft_steps} steps)" if s.sft_steps else ""
        table.add_row(
            "sft loss first → last", f"{_f(s.sft_loss_first)} → {_f(s.sft_loss_last)}{steps}"
        )
    table.add_row("wall time", _duration(s.wall_s))
    for name, secs in s.phases.items():
        share = secs / s.wall_s if s.wall_s else 0.0
        table.add_row(f"  {name}", f"{_duration(secs)} ({share:.0%})")
    if s.spans:
        table.add_row("spans (mean s/step)", "")
    for name, secs in s.spans.items():
        table.add_row(f"  {name}", f"{secs:.3f}")
    if s.totals.get("infra/excluded"):
        reasons = ", ".join(
            f"{k.split('/', 1)[1]} {v:.0f}"
            for k, v in s.totals.items()
            if k.startswith("termination_count/")
        )
        table.add_row(
            "infra failures (left out)",
            f"{s.totals['infra/excluded']:.0f} episodes, "
            f"{s.totals.get('infra/groups_dropped', 0):.0f} groups dropped ({reasons})",
        )
    if s.stale:
        table.add_row("staleness (trainer.async)", "")
    for name, value in s.stale.items():
        kind = "total" if name in STALE_CUMULATIVE else "sum over steps"
        text = f"{value:.3f}" if name.endswith("_s") else f"{value:.0f}"
        table.add_row(f"  {name}", f"{text} ({kind})")
    for k in ("kl", "entropy", "response_length/mean"):
        if k in s.last:
            table.add_row(f"{k} (last)", _f(s.last[k], 4))
    console.print(table)
    if args.plots:
        for p in write_plots(run):
            console.print(f"plot: {p}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from agentrl.report import write_plots

    paths = write_plots(args.run_dir, args.out)
    if not paths:
        print(f"agentrl runs plot: no numeric metrics in {args.run_dir}")
        return 2
    for p in paths:
        print(p)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrl.report import METRICS_FILE, summarize

    root = Path(args.root)
    runs = sorted(p.parent for p in root.glob(f"**/{METRICS_FILE}"))
    cols = ("run", "steps", "reward first → last", "best", "wall")
    table = Table(*cols, title=f"runs under {root}")
    for run in runs:
        try:
            s = summarize(run)
        except ValueError as e:
            table.add_row(str(run), "?", f"[red]{e}[/]", "", "")
            continue
        table.add_row(
            str(run.relative_to(root)) if run != root else ".",
            str(s.steps),
            f"{_f(s.first_reward)} → {_f(s.last_reward)}",
            _f(s.best_reward),
            _duration(s.wall_s),
        )
    Console().print(table)
    return 0 if runs else 1
