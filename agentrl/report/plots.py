"""PNG training curves for a run folder, one figure per metric family.

Families are matched by key name (`reward`, `success`, `length`, `kl`, ...) so whatever the
trainer logs gets plotted without a schema; keys that match no family go to `other.png` as
small multiples. Evaluation points from `eval.jsonl` are overlaid as markers on the curve
with the same key. Matplotlib runs on the Agg backend: no display, safe on headless nodes.
"""

from __future__ import annotations

from pathlib import Path

from .metrics import EVAL_FILE, METRICS_FILE, read_rows, series

# (file stem, title, patterns): a key belongs to the first family with a pattern in it; a
# pattern ending in `$` must end the key (`/s` per second: `async/stale...` and `time/step`
# are not throughputs).
FAMILIES: list[tuple[str, str, tuple[str, ...]]] = [
    ("reward", "Reward", ("reward", "return", "score")),
    ("success", "Success rate", ("success", "accuracy", "pass@", "solved")),
    ("throughput", "Throughput", ("per_s", "throughput", "/s$", "_tok_s$")),
    ("length", "Lengths", ("length", "tokens", "turns", "num_turns")),
    ("kl", "KL divergence", ("kl",)),
    ("entropy", "Entropy", ("entropy",)),
    ("loss", "Losses", ("loss",)),
    ("ratio", "IS ratio / clipping", ("ratio", "clip", "tis")),
    ("grad", "Gradient norm", ("grad",)),
    ("time", "Time", ("time", "_s")),
]
MAX_OTHER = 16
MAX_LINES = 8


def family_of(key: str) -> str:
    k = key.lower()
    for stem, _, subs in FAMILIES:
        if any(k.endswith(s[:-1]) if s.endswith("$") else s in k for s in subs):
            return stem
    return "other"


def smooth(ys: list[float]) -> list[float]:
    """Centred moving average (window ~n/15): shows the trend without an EMA's lag."""
    h = max(1, len(ys) // 30)
    return [
        sum(ys[max(0, i - h) : i + h + 1]) / len(ys[max(0, i - h) : i + h + 1])
        for i in range(len(ys))
    ]


def _draw(ax, xs: list[float], ys: list[float], label: str, color: str) -> None:  # noqa: ANN001
    if len(ys) > 20:  # noisy per-step curves: raw faint, smoothed solid
        ax.plot(xs, ys, color=color, alpha=0.25, linewidth=1)
        ax.plot(xs, smooth(ys), color=color, linewidth=1.8, label=label)
    else:
        ax.plot(xs, ys, color=color, linewidth=1.8, marker="o", markersize=3, label=label)


def write_plots(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write `<run_dir>/plots/<family>.png` for each family with data; returns the paths."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    run_dir = Path(run_dir)
    curves = series(read_rows(run_dir / METRICS_FILE))
    evals = series(read_rows(run_dir / EVAL_FILE))
    if not curves:
        return []
    out = Path(out_dir) if out_dir else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[str]] = {}
    for key in sorted(curves):
        groups.setdefault(family_of(key), []).append(key)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    titles = {stem: title for stem, title, _ in FAMILIES}
    written = []
    for stem, keys in groups.items():
        if stem == "other":
            continue
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        for i, key in enumerate(keys[:MAX_LINES]):
            color = colors[i % len(colors)]
            _draw(ax, *curves[key], label=key, color=color)
            if key in evals:
                ax.plot(*evals[key], "D", color=color, markersize=6, label=f"eval {key}")
        ax.set_title(f"{titles[stem]} · {run_dir.name}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}.png", plt))
    other = groups.get("other", [])[:MAX_OTHER]
    if other:
        cols = min(4, len(other))
        rows = (len(other) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), dpi=100)
        flat = list(np.atleast_1d(axes).ravel())
        for ax, key in zip(flat, other, strict=False):
            _draw(ax, *curves[key], label=key, color=colors[0])
            ax.set_title(key, fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in flat[len(other) :]:
            ax.axis("off")
        fig.tight_layout()
        written.append(_save(fig, out / "other.png", plt))
    return written


def _save(fig, path: Path, plt) -> Path:  # noqa: ANN001
    fig.savefig(path)
    plt.close(fig)
    return path
