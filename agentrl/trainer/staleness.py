"""What a pipelined run does about groups that fall too far behind the policy: the staleness
policy (`trainer.async.staleness`), one class per policy.

Why a component: `PipelinedCollector` (`agentrl.trainer.pipeline`) has one mechanism (issue
prompts, take finished groups, keep what a checkpoint must resume) and asks its policy three
questions: how many prompts may be issued now (admission), which outstanding groups this
step must take (waiting for them if need be), and what happens to a finished group that is
too stale (dropped; its prompt issued again or not). The answers, and the counters that show
them in the metrics, are the policy's; the collector has no branch on the mode and the
`Trainer` never hears of it. `agentrl.assembly` picks the class (`POLICIES`) from the config.

Terms. K = `trainer.async.max_staleness`, B = `data.batch_size` prompts, training step `s`
updates the policy of version v = s - 1, and a token's staleness is v minus the version of
the weights that sampled it.

- The *issue version* of a prompt is the policy version of the engine's weights when the
  prompt is submitted: v inside `next_batch(s)`, because the trainer syncs the weights before
  it asks for the next batch and every producer applies a sync before any later submission.
  Weights only move forward, so every token the group samples is at least that version: the
  issue version is a lower bound on the group's oldest token (equal when the group's first
  token is sampled before the next sync), and trained at version v' the group is at most
  v' - issue version behind. `wait` relies on exactly this bound; it never reads a token.
- *Admission* (AReaL's capacity rule): a prompt is issued only while
  issued_total <= (v + K + 1) * B, counting the prompts trained so far and the outstanding
  ones (issued, not yet trained or dropped; a drop gives its slot back). A step trains B, so
  at a step's start this is "at most K + 1 batches outstanding": `prefetch_batches` deeper
  than K + 1 is throttled, and the prompts it would have issued are counted as held.

| policy | admission | a finished group more than K behind | guarantee |
|---|---|---|---|
| `drop` | none (`prefetch_batches` deep) | discarded; its prompt is not run again | staleness <= K; prompts are lost |
| `pace` | yes | discarded; its prompt is issued again first | staleness <= K; every prompt trained once |
| `wait` | yes | cannot happen: a step takes every group issued K versions ago, waiting for it | staleness <= K, nothing dropped; a step may wait for a straggler |

Counters (`metrics`): `*_groups` count since the run began and are kept in the checkpoint
(`state`), so a resumed run continues them; `held_prompts` and `wait_s` describe the step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from agentrl.types import TrajectoryGroup

PREFIX = "async/stale/"


def oldest(group: TrajectoryGroup) -> int:
    """The oldest policy version among the group's sampled tokens (large when none)."""
    versions = [v for t in group.trajectories for v in t.weight_versions if v >= 0]
    return min(versions, default=1 << 62)


class StalenessPolicy(ABC):
    """The decisions of one `trainer.async.staleness` value; `PipelinedCollector` asks them
    in this order each step: `begin_step`, `admit` (at each top-up), `due` (once), then per
    finished group `too_stale` → `on_stale`, and `waited` when the step is complete."""

    name: ClassVar[str]
    # The cumulative counters this policy reports (beside `dropped_groups`, which all do:
    # `wait` reports its zero so "never dropped" is visible).
    counted: ClassVar[tuple[str, ...]] = ()

    def __init__(self, max_staleness: int, batch_size: int) -> None:
        if max_staleness < 1:
            raise ValueError(f"{self.name}: trainer.async.max_staleness must be >= 1")
        self.k, self.b = max_staleness, max(batch_size, 1)
        self.counts = dict.fromkeys(("dropped_groups", *self.counted), 0.0)
        self.step: dict[str, float] = {}

    def begin_step(self) -> None:
        """A new step: its per-step figures start from zero."""
        self.step = {}

    def admit(self, version: int, trained: int, outstanding: int, wanted: int) -> int:
        """How many of `wanted` prompts (what `prefetch_batches` would issue now) may be
        issued at policy version `version`, with `trained` prompts trained so far and
        `outstanding` issued and neither trained nor dropped."""
        return wanted

    def most_outstanding(self, depth: int) -> int:
        """The most prompts kept outstanding when `prefetch_batches` asks for `depth`."""
        return depth

    def due(self, version: int, issued_at: int) -> bool:
        """Whether an outstanding group issued at `issued_at` must be trained by the step
        that updates `version` (the step then waits for it)."""
        return False

    def too_stale(self, version: int, group: TrajectoryGroup) -> bool:
        """Whether a finished group's oldest token is more than K versions behind."""
        return version - oldest(group) > self.k

    @abstractmethod
    def on_stale(self) -> bool:
        """A finished group was too stale and is not trained: count it; True when its
        prompt is issued again (first, before new prompts)."""

    def waited(self, seconds: float, groups: int) -> None:
        """The step waited `seconds` past the point where B groups had finished, for
        `groups` groups it had to take (`due`)."""

    def metrics(self) -> dict[str, float]:
        return {PREFIX + k: v for k, v in (self.counts | self.step).items()}

    def state(self) -> dict[str, float]:
        return dict(self.counts)

    def load_state(self, counts: dict[str, float]) -> None:
        """Counters from a checkpoint (those of another policy are ignored)."""
        self.counts |= {k: float(v) for k, v in counts.items() if k in self.counts}


class DropStale(StalenessPolicy):
    """`drop`: no admission; a group more than K behind is discarded and its prompt is not
    run again (the step takes the next finished group). Cheapest on the engine's queue,
    but a dropped prompt is lost (`async/stale/dropped_groups`)."""

    name = "drop"

    def on_stale(self) -> bool:
        self.counts["dropped_groups"] += 1
        return False


class Admitting(StalenessPolicy):
    """A policy that issues by AReaL's capacity rule (`pace`, `wait`)."""

    def admit(self, version: int, trained: int, outstanding: int, wanted: int) -> int:
        """issued_total <= (version + K + 1) * B; what it refuses of `wanted` is this step's
        `held_prompts` (the most any top-up held back)."""
        room = (version + self.k + 1) * self.b - (trained + outstanding)
        n = max(min(wanted, room), 0)
        self.step["held_prompts"] = max(self.step.get("held_prompts", 0.0), float(wanted - n))
        return n

    def most_outstanding(self, depth: int) -> int:
        return min(depth, (self.k + 1) * self.b)  # a step's start: K + 1 batches


class PaceIssues(Admitting):
    """`pace`: admission keeps prompts from being issued faster than they can be trained
    within K versions; a straggler still more than K behind is dropped and its prompt
    issued again first (`refilled_groups`, one per drop: the drop gives its slot back)."""

    name = "pace"
    counted = ("refilled_groups",)

    def on_stale(self) -> bool:
        self.counts["dropped_groups"] += 1
        self.counts["refilled_groups"] += 1
        return True


class WaitForStragglers(Admitting):
    """`wait`: admission, and a step takes every outstanding group issued K or more versions
    ago, waiting for it if it is still running: left for the next step it could be K + 1
    behind. With admission at most B groups are that old, so a step always has room for
    them, and nothing is ever dropped (`dropped_groups` stays 0). The cost is the wait
    (`wait_s`, `waited_groups`): with the default depth and K = 1, each step trains exactly
    what the previous step left running."""

    name = "wait"
    counted = ("waited_groups",)

    def due(self, version: int, issued_at: int) -> bool:
        return version - issued_at >= self.k

    def on_stale(self) -> bool:
        # Unreachable while the issue-version bound holds; if it ever failed, the group is
        # still not trained past K: dropped (counted, so the broken bound shows) and re-issued.
        self.counts["dropped_groups"] += 1
        return True

    def waited(self, seconds: float, groups: int) -> None:
        self.step["wait_s"] = seconds
        self.counts["waited_groups"] += groups


POLICIES: dict[str, type[StalenessPolicy]] = {
    p.name: p for p in (DropStale, PaceIssues, WaitForStragglers)
}
