"""What a pipelined checkpoint keeps of the groups in flight, and what `--resume` does with it.

Why its own module: `PipelinedCollector` (`agentrl.trainer.pipeline`) decides *which*
prompts are outstanding; this module holds *what* is kept of their episodes and the
accounting of what became of them, so the collector stays one mechanism.

A checkpoint's `async_inflight` maps each outstanding prompt to its issue version and, per
sample, an `EpisodeState` (`agentrl.rollout.resume`) whose token versions are *policy*
versions (the engine's own counts restart with each process; `collect.STAMPED` marks them, so
the resumed process converts only the tokens it samples). On resume the prompt is issued
again first, with those states: a finished trajectory is kept as is, a snapshot of a
resumable env (`ResumableEnv`) is continued from its last turn boundary, a snapshot of an env
that is not resumable and an episode that had not finished a turn run again from the seed.
The four outcomes are counted (`async/resume/kept`, `continued`, `reissued`, `restarted`,
cumulative and kept in the checkpoint) and the resumed run prints one line saying how many of
each and why the reissued ones could not continue.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl.rollout.resume import EpisodeSnapshot, EpisodeState
from agentrl.types import Trajectory

from .collect import stamp_trajectory

# The checkpoint key of the cumulative outcome counters (the kept groups: `collect.INFLIGHT_KEY`).
RESUME_KEY = "async_resume_counts"
PREFIX = "async/resume/"
OUTCOMES = ("kept", "continued", "reissued", "restarted")


def outcome(state: EpisodeState) -> str:
    """What resuming does with one kept episode (one of `OUTCOMES`)."""
    if isinstance(state, Trajectory):
        return "kept"
    if isinstance(state, EpisodeSnapshot):
        return "continued" if state.resumable else "reissued"
    return "restarted"


def in_policy_versions(states: Iterable[EpisodeState], offset: int) -> list[EpisodeState]:
    """Copies of `states` whose token versions are all policy versions (`stamp_trajectory`
    with the engine's `offset`; a resumed process leaves them as they are and stamps only
    the tokens it samples)."""
    out: list[EpisodeState] = []
    for s in states:
        s = copy.deepcopy(s)
        traj = s.traj if isinstance(s, EpisodeSnapshot) else s
        if traj is not None:
            stamp_trajectory(traj, offset)
        out.append(s)
    return out


class ResumeLedger:
    """The groups a checkpoint kept that are not issued yet, and the outcome counters."""

    def __init__(self) -> None:
        self.groups: dict[int, tuple[int, list[EpisodeState]]] = {}
        self.counts = dict.fromkeys(OUTCOMES, 0.0)
        self.snapshot_errors = 0.0

    def take(self, k: int) -> tuple[int, list[EpisodeState]] | None:
        """The kept issue version and episodes of prompt `k` (policy versions), counted as
        they are issued; None when the checkpoint kept nothing of it."""
        kept = self.groups.pop(k, None)
        if kept is not None:
            for s in kept[1]:
                self.counts[outcome(s)] += 1
        return kept

    def metrics(self) -> dict[str, float]:
        m = {PREFIX + k: v for k, v in self.counts.items()}
        return m | (
            {PREFIX + "snapshot_errors": self.snapshot_errors} if self.snapshot_errors else {}
        )

    def state(self) -> dict[str, Any]:
        return dict(self.counts) | {"snapshot_errors": self.snapshot_errors}

    def load(self, groups: dict[int, dict[str, Any]], counts: dict[str, float]) -> list[str]:
        """Restore from a checkpoint; returns the line the resumed run prints (none when the
        checkpoint kept no episode)."""
        self.groups = {
            int(k): (int(g["issued_at"]), list(g["episodes"])) for k, g in groups.items()
        }
        self.counts |= {k: float(v) for k, v in counts.items() if k in self.counts}
        self.snapshot_errors = float(counts.get("snapshot_errors", 0.0))
        return summary(self.groups)


def summary(groups: dict[int, tuple[int, list[EpisodeState]]]) -> list[str]:
    states = [s for _, episodes in groups.values() for s in episodes]
    if not groups:
        return []
    n = dict.fromkeys(OUTCOMES, 0)
    for s in states:
        n[outcome(s)] += 1
    why = sorted({s.why for s in states if isinstance(s, EpisodeSnapshot) and not s.resumable})
    line = (
        f"resume: {len(groups)} groups were in flight at the checkpoint: {n['kept']} finished "
        f"episodes kept, {n['continued']} continued from their last turn, {n['reissued']} run "
        f"again from their seed{' (not resumable: ' + '; '.join(why) + ')' if why else ''}, "
        f"{n['restarted']} started again (no turn finished)"
    )
    return [line]


def stored(issued_at: int, states: Sequence[EpisodeState]) -> dict[str, Any]:
    """One group's entry in `async_inflight`."""
    return {"issued_at": issued_at, "episodes": list(states)}
