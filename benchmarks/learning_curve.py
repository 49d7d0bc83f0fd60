"""Plot one run's learning curve: training reward per step and held-out success.

    python benchmarks/learning_curve.py RUN_DIR OUT.png [--title TEXT]

Reads the trainer's own files in RUN_DIR: `metrics.jsonl` (per step `reward/mean`, and
`success_rate` where logged) and `eval.jsonl` (the held-out evals, step 0 = before RL). Used
for the Agents SDK run in benchmarks/notes/learning.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in rows(args.run_dir / "metrics.jsonl") if "reward/mean" in r]
    held = rows(args.run_dir / "eval.jsonl")
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(
        [r["step"] for r in train],
        [r["reward/mean"] for r in train],
        "o-",
        label="training reward (mean of the step's agent runs, sampled)",
    )
    ax.plot(
        [r["step"] for r in held],
        [r["success_rate"] for r in held],
        "s--",
        color="tab:red",
        label=f"held-out success (greedy, {int(held[0]['episodes']) if held else 0} tasks)",
    )
    for r in held:
        ax.annotate(
            f"{100 * r['success_rate']:.1f}%",
            (r["step"], r["success_rate"]),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
        )
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward / success")
    ax.set_ylim(-0.05, 1.1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    steps = [r["step"] for r in train] + [r["step"] for r in held]
    ax.set_xticks(range(0, max(steps, default=0) + 1))
    ax.set_xlim(-0.5, max(steps, default=0) + 0.5)
    if args.title:
        ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
