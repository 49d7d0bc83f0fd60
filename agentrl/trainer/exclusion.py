"""Infrastructure failures leave the step's training batch, not its record.

An episode that ended for the machine's sake (`Trajectory.infra_failed`: an engine abort, a
sandbox that failed, an env that raised, the wall-clock timeout; the one table is
`agentrl.types.TERMINATION_KIND`) carries a reward that scores no action of the policy: a 0 there
is fake, and inside a GRPO group it drags the group mean and inflates its std for every
other sample (open-instruct measured 5-15% of episodes so hit under spot failures). So such
episodes are taken out of their group before the batch is built: out of the loss and out of
the group mean and std.

The group shrinks; it is not refilled. The group rule (`trainable`), here and in the harness
collector, which keeps its failed runs apart before this: for a group-relative estimator
(registry trait `group_relative`: grpo, rloo, ...) a group left with fewer than 2 finished
runs is dropped whole (one sample is its own baseline: advantage 0, and `group_stats` refuses
it); for the others only a group with none left disappears. A run is an episode: the segments
of one split harness session (one `metadata["episode"]`) count once, as the advantage counts
them (`batch.episode_index`). A step left with no group trains nothing (the trainer skips its
update). Left-out episodes stay in the step's rollout dump with `metadata["left_out"]` saying
why ("infra" or "group_dropped"), so `agentrl view` shows them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentrl.types import Trajectory, TrajectoryGroup


@dataclass
class Exclusion:
    """What trains (`groups`), what does not (`left_out`), and the step's counts."""

    groups: list[TrajectoryGroup]
    left_out: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def runs(trajs: Iterable[Trajectory]) -> list[str]:
    """The distinct runs (episodes) among trajectories, in order: segments of one harness
    session share `metadata["episode"]`; a built-in episode is a run of its own."""
    return list(dict.fromkeys(str(t.metadata.get("episode", id(t))) for t in trajs))


def min_runs(*, group_relative: bool) -> int:
    """Finished runs a group needs to train: 2 under a group-relative estimator, else 1."""
    return 2 if group_relative else 1


def trainable(trajs: Sequence[Trajectory], *, group_relative: bool) -> bool:
    """The group rule: do these finished trajectories of one group hold enough runs to train?"""
    return len(runs(trajs)) >= min_runs(group_relative=group_relative)


def exclude_infra_failures(groups: list[TrajectoryGroup], *, group_relative: bool) -> Exclusion:
    """Shrink each group to its episodes that did not fail for infrastructure reasons; drop a
    group whose valid episodes are not `trainable` (fewer than 2 runs when `group_relative`,
    none otherwise).

    Metrics: `termination_count/<reason>` (episodes per termination reason, all of them),
    `infra/excluded` (infra-failed episodes), `infra/groups_shrunk` (groups that lost some but
    train), `infra/groups_dropped` (groups that train nothing), `infra/left_out` (episodes not
    trained: the excluded plus the valid survivors of dropped groups)."""
    kept: list[TrajectoryGroup] = []
    left_out: list[Trajectory] = []
    shrunk = dropped = 0
    for g in groups:
        valid = [t for t in g.trajectories if not t.infra_failed]
        for t in g.trajectories:
            if t.infra_failed:
                t.metadata["left_out"] = "infra"
                left_out.append(t)
        if not trainable(valid, group_relative=group_relative):
            dropped += 1
            for t in valid:
                t.metadata["left_out"] = "group_dropped"
                left_out.append(t)
        elif len(valid) == len(g.trajectories):
            kept.append(g)  # untouched: the same group object goes on
        else:
            kept.append(TrajectoryGroup(g.group_id, valid))
            shrunk += 1
    trajs = [t for g in groups for t in g.trajectories]
    counts = collections.Counter(t.termination for t in trajs)
    metrics = {f"termination_count/{reason}": float(k) for reason, k in sorted(counts.items())}
    metrics |= {
        "infra/excluded": float(sum(t.infra_failed for t in trajs)),
        "infra/groups_shrunk": float(shrunk),
        "infra/groups_dropped": float(dropped),
        "infra/left_out": float(len(left_out)),
    }
    return Exclusion(kept, left_out, metrics)
