"""Read a run folder's `metrics.jsonl` / `eval.jsonl` and summarise it.

The trainer appends one JSON object per step to `metrics.jsonl` (`step` plus any numeric
keys: `reward/mean`, `success_rate`, `response_length/mean`, `kl`, `entropy`, ...) and one per
evaluation to `eval.jsonl` (and, when an SFT bootstrap runs, the untouched model's eval to
`untouched.jsonl`). Nothing here assumes a fixed key set: the reward and success keys
are found by name, non-numeric values are ignored, and a half-written last line (a run that
is still going, or was killed mid-write) is skipped rather than fatal.

Wall time, in order of preference: the sessions in `run.json` (the trainer records when each
fresh or resumed session started and how long its setup took), the span of `timestamp` /
`time` (unix seconds) over all of the run's files, the last cumulative `time/elapsed_s` /
`elapsed_s`, the sum of per-step `time/step` / `time/step_s`. Phases (`RunSummary.phases`)
split it into setup (model and engine build), SFT, evals, RL steps and the rest
(checkpoints, plots), from the `time/*` keys the trainer logs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
# The held-out eval of the model as loaded, before the SFT bootstrap (a file of its own, so
# `eval.jsonl` stays the curve of the policy being trained, SFT'd at step 0).
UNTOUCHED_FILE = "untouched.jsonl"
SFT_FILE = "sft.jsonl"
RUN_FILE = "run.json"
REWARD_KEYS = ("reward/mean", "reward", "rewards/mean", "train/reward/mean", "reward_mean")
SUCCESS_KEYS = ("success_rate", "success/mean", "success", "accuracy", "pass@1")
X_KEYS = ("step", "global_step", "iteration")
# Keys that are coordinates or bookkeeping, not curves.
NOT_CURVES = {*X_KEYS, "timestamp", "epoch", "time", "wall_time"}


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """JSON objects one per line; blank lines and an unterminated final line are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines):
                break  # being written right now
            raise ValueError(f"{path}:{i}: not JSON: {e}") from e
        if isinstance(row, dict):
            rows.append(row)
    return rows


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def x_of(row: dict[str, Any], index: int) -> float:
    for k in X_KEYS:
        if is_number(row.get(k)):
            return float(row[k])
    return float(index)


def series(rows: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """{key: (xs, ys)} for every numeric key; x is the row's step (or its index)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for i, row in enumerate(rows):
        x = x_of(row, i)
        for k, v in row.items():
            if k in NOT_CURVES or not is_number(v):
                continue
            xs, ys = out.setdefault(k, ([], []))
            xs.append(x)
            ys.append(float(v))
    return out


def pick_key(keys: Any, preferred: tuple[str, ...], contains: str) -> str | None:
    """The first preferred key present, else the first key containing `contains`."""
    keys = list(keys)
    for k in preferred:
        if k in keys:
            return k
    return next((k for k in keys if contains in k.lower()), None)


# `async/stale/*` counters the staleness policy logs as running totals (checkpointed, so a
# resumed run goes on counting); every other `async/stale/*` key is a per-step figure.
STALE_PREFIX = "async/stale/"
STALE_CUMULATIVE = ("dropped_groups", "refilled_groups", "waited_groups")


@dataclass
class RunSummary:
    run_dir: Path
    steps: int = 0
    last_step: float | None = None
    reward_key: str | None = None
    first_reward: float | None = None
    last_reward: float | None = None
    best_reward: float | None = None
    best_step: float | None = None
    success_key: str | None = None
    last_success: float | None = None
    # The model as loaded, before the SFT bootstrap (empty when no SFT ran).
    eval_untouched: dict[str, float] = field(default_factory=dict)
    eval_before: dict[str, float] = field(default_factory=dict)
    eval_after: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    last: dict[str, float] = field(default_factory=dict)
    # Seconds per phase (setup, sft, eval, rl steps, other); they add up to wall_s.
    phases: dict[str, float] = field(default_factory=dict)
    sft_steps: int = 0
    sft_loss_first: float | None = None
    sft_loss_last: float | None = None
    # Mean seconds per step of each `span/<side>/<phase>` metric (trainer and rollout sides).
    spans: dict[str, float] = field(default_factory=dict)
    # Totals over the run: `infra/*` (episodes left out of training, groups dropped) and
    # `termination_count/<reason>`.
    totals: dict[str, float] = field(default_factory=dict)
    # `trainer.async` staleness policy counters (`async/stale/<name>`): the last value of the
    # cumulative ones (STALE_CUMULATIVE), the sum over steps of the per-step ones.
    stale: dict[str, float] = field(default_factory=dict)


def wall_time(rows: list[dict[str, Any]]) -> float | None:
    for k in ("timestamp", "time"):  # unix seconds (the trainer's logger writes `time`)
        stamps = [float(r[k]) for r in rows if is_number(r.get(k)) and r[k] > 1e9]
        if len(stamps) >= 2:
            return max(stamps) - min(stamps)
    for k in ("time/elapsed_s", "elapsed_s"):
        vals = [float(r[k]) for r in rows if is_number(r.get(k))]
        if vals:
            return max(vals)
    for k in ("time/step", "time/step_s", "step_time_s"):
        vals = [float(r[k]) for r in rows if is_number(r.get(k))]
        if vals:
            return sum(vals)
    return None


def _eval_point(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if is_number(v)}


def summarize(run_dir: str | Path) -> RunSummary:
    """Steps, first/last/best reward, final success, eval before/after and wall time."""
    run_dir = Path(run_dir)
    rows = read_rows(run_dir / METRICS_FILE)
    s = RunSummary(run_dir, steps=len(rows))
    curves = series(rows)
    if rows:
        s.last_step = x_of(rows[-1], len(rows) - 1)
        s.last = {k: ys[-1] for k, (_, ys) in curves.items()}
    s.reward_key = pick_key(curves, REWARD_KEYS, "reward")
    if s.reward_key:
        xs, ys = curves[s.reward_key]
        best = max(range(len(ys)), key=ys.__getitem__)
        s.first_reward, s.last_reward = ys[0], ys[-1]
        s.best_reward, s.best_step = ys[best], xs[best]
    s.success_key = pick_key(curves, SUCCESS_KEYS, "success")
    if s.success_key:
        s.last_success = curves[s.success_key][1][-1]
    evals = read_rows(run_dir / EVAL_FILE)
    if evals:
        s.eval_before = _eval_point(evals[0])
        s.eval_after = _eval_point(evals[-1]) if len(evals) > 1 else {}
    if untouched := read_rows(run_dir / UNTOUCHED_FILE):
        s.eval_untouched = _eval_point(untouched[-1])
    evals = [*untouched, *evals]  # for wall time and the eval phase
    sft = read_rows(run_dir / SFT_FILE)
    losses = [float(r["loss"]) for r in sft if is_number(r.get("loss"))]
    if losses:
        s.sft_steps, s.sft_loss_first, s.sft_loss_last = len(losses), losses[0], losses[-1]
    else:  # older runs logged only the summary row
        firsts = [float(r[k]) for r in sft for k in ("loss_first", "sft/loss_first") if k in r]
        lasts = [float(r[k]) for r in sft for k in ("loss_last", "sft/loss_last") if k in r]
        s.sft_loss_first = firsts[0] if firsts else None
        s.sft_loss_last = lasts[-1] if lasts else None
    sessions = _sessions(run_dir, [*rows, *evals, *sft])
    s.wall_s = sum(end - start for start, end, _ in sessions) if sessions else None
    if s.wall_s is None:
        s.wall_s = wall_time([*rows, *evals, *sft]) or wall_time(rows)
    if s.wall_s is not None:
        s.phases = _phases(s.wall_s, sessions, rows, evals, sft)
    for k, (_, ys) in sorted(curves.items()):
        if k.startswith("span/"):
            s.spans[k.removeprefix("span/")] = sum(ys) / len(ys)
        elif k.startswith(("infra/", "termination_count/")):
            s.totals[k] = sum(ys)
        elif k.startswith(STALE_PREFIX):
            name = k.removeprefix(STALE_PREFIX)
            s.stale[name] = ys[-1] if name in STALE_CUMULATIVE else sum(ys)
    return s


def _sessions(run_dir: Path, rows: list[dict[str, Any]]) -> list[tuple[float, float, float]]:
    """(start, end, setup_s) per session in run.json; a session that never recorded its end
    (killed, or still running) ends at the last row logged after it started."""
    try:
        info = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    stamps = sorted(float(r["time"]) for r in rows if is_number(r.get("time")))
    out = []
    for sess in info.get("sessions", []):
        start, end = float(sess["start"]), sess.get("end")
        if end is None:
            later = [t for t in stamps if t >= start]
            end = later[-1] if later else start
        out.append((start, float(end), float(sess.get("setup_s", 0.0))))
    return out


def _phases(
    wall: float,
    sessions: list[tuple[float, float, float]],
    rows: list[dict[str, Any]],
    evals: list[dict[str, Any]],
    sft: list[dict[str, Any]],
) -> dict[str, float]:
    def total(rs: list[dict[str, Any]], key: str) -> float:
        return sum(float(r[key]) for r in rs if is_number(r.get(key)))

    phases = {
        "setup": sum(setup for _, _, setup in sessions),
        "sft": total(sft, "time/sft"),
        "eval": total(evals, "time/eval"),
        "rl steps": total(rows, "time/step"),
    }
    phases = {k: v for k, v in phases.items() if v > 0}
    counted = sum(phases.values())
    phases["other"] = max(wall - counted, 0.0)
    if counted > wall:  # clocks disagree (old run without run.json): scale to the wall
        phases = {k: v * wall / counted for k, v in phases.items()}
    return phases
