"""Plot learning curves: training reward per step and held-out success, one run or several
overlaid (the same recipe on two engines, two seeds...).

    python benchmarks/learning_curve.py RUN_DIR OUT.png [--title TEXT]
    python benchmarks/learning_curve.py hf=RUNS/a vllm=RUNS/b OUT.png --title '...'

Reads the trainer's own files in each RUN_DIR: `metrics.jsonl` (per step `reward/mean`) and
`eval.jsonl` (the held-out evals, step 0 = before RL). A `LABEL=` prefix names a run in the
legend (default: the folder's name). Used for the Agents SDK run and the hf-vs-vLLM run in
benchmarks/notes/learning.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_arg(spec: str) -> tuple[str, Path]:
    label, eq, path = spec.rpartition("=")  # a label may hold "=" (engine.kind=hf)
    run = Path(path if eq else spec)
    if not (run / "metrics.jsonl").is_file():
        raise argparse.ArgumentTypeError(f"{run}: no metrics.jsonl (not a run folder)")
    return (label if eq else run.name), run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=run_arg, metavar="[LABEL=]RUN_DIR")
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    single = len(args.runs) == 1
    last = 0
    for i, (label, run) in enumerate(args.runs):
        train = [r for r in rows(run / "metrics.jsonl") if "reward/mean" in r]
        held = rows(run / "eval.jsonl")
        color = f"C{i}"
        n = int(held[0]["episodes"]) if held else 0
        ax.plot([r["step"] for r in train], [r["reward/mean"] for r in train], "o-",
                color=color, markersize=3 if not single else 6,
                label=("" if single else f"{label}: ")
                + "training reward (mean of the step's agent runs, sampled)")  # fmt: skip
        ax.plot([r["step"] for r in held], [r["success_rate"] for r in held], "s--",
                color="tab:red" if single else color,
                label=("" if single else f"{label}: ") + f"held-out success (greedy, {n} tasks)")  # fmt: skip
        for r in held:
            ax.annotate(f"{100 * r['success_rate']:.1f}%", (r["step"], r["success_rate"]),
                        textcoords="offset points", xytext=(0, 8 if i % 2 == 0 else -14),
                        ha="center", fontsize=8 if not single else 10, color=color)  # fmt: skip
        last = max([last] + [r["step"] for r in train] + [r["step"] for r in held])
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward / success")
    ax.set_ylim(-0.05, 1.1)
    ax.grid(alpha=0.3)
    ax.legend(loc="center right" if not single else "upper right", fontsize=7)
    if last <= 30:
        ax.set_xticks(range(0, last + 1))
    ax.set_xlim(-0.5, last + 0.5)
    if args.title:
        ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
