"""The staleness policies (`trainer.async.staleness`, agentrl/trainer/staleness.py) and the
pipelined collector's use of them, decision by decision.

- Each policy's own decisions: admission by AReaL's capacity rule (`pace`, `wait`; `drop`
  admits what `prefetch_batches` asks), which outstanding groups a step owes (`wait`: those
  issued K versions ago), what a group more than K behind costs (dropped, and its prompt
  issued again or not), the counters, and their checkpoint round trip.
- The config names the three values, and any other is one clear error naming the key.
- The collector under each policy, with groups finishing in a scripted order: `wait` holds
  back groups that finished early to take the ones it owes, and never drops; `pace` issues
  at most K + 1 batches and re-issues a straggler's prompt first; `drop` issues
  `prefetch_batches` deep and never issues a prompt twice. A resumed collector issues the
  checkpoint's pending prompts first and continues the counters.

`ScriptedProducer` is a named fake: these tests are about the order in which groups finish,
and a real engine cannot be made to finish groups in a chosen order. Real pipelined runs of
each policy on the tiny model are in tests/trainer/test_async.py.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, get_args, get_type_hints

import pytest
from rich.console import Console

from agentrl.assembly.collect import staleness_policy
from agentrl.config import AsyncConfig, ConfigError, DataConfig, TrainConfig, load_config
from agentrl.report.progress import RunProgress
from agentrl.trainer.data import TaskSource
from agentrl.trainer.pipeline import PipelinedCollector
from agentrl.trainer.staleness import (
    POLICIES,
    DropStale,
    PaceIssues,
    StalenessPolicy,
    WaitForStragglers,
    oldest,
)
from agentrl.types import Trajectory, TrajectoryGroup

QUIET = RunProgress(Console(), enabled=False)


def _group(*versions: int) -> TrajectoryGroup:
    """One episode whose sampled tokens carry `versions` (an env token in between: -1)."""
    t = Trajectory(prompt_ids=[1, 2])
    t.append([5] * len(versions), trained=True, logprobs=[-0.5] * len(versions))
    t.append([7], trained=False)
    t.weight_versions = [*versions, -1]
    return TrajectoryGroup("g", [t])


# ---------------------------------------------------------------- each policy's decisions
def test_the_config_names_the_three_policies_and_refuses_others() -> None:
    allowed = get_args(get_type_hints(AsyncConfig)["staleness"])
    assert set(allowed) == set(POLICIES) == {"drop", "wait", "pace"}
    assert AsyncConfig().staleness == "pace"
    for name, cls in [("drop", DropStale), ("pace", PaceIssues), ("wait", WaitForStragglers)]:
        cfg = load_config(TrainConfig, None, [f"trainer.async.staleness={name}"])
        cfg.trainer.async_.max_staleness = 2
        policy = staleness_policy(cfg)
        assert type(policy) is cls and (policy.k, policy.b) == (2, cfg.data.batch_size)
    with pytest.raises(ConfigError, match=r"trainer\.async\.staleness: 'later' is not one of"):
        load_config(TrainConfig, None, ["trainer.async.staleness=later"])
    with pytest.raises(ValueError, match="max_staleness must be >= 1"):
        WaitForStragglers(0, 2)


@pytest.mark.parametrize("cls", [PaceIssues, WaitForStragglers])
def test_admission_is_the_capacity_rule(cls: type[StalenessPolicy]) -> None:
    """issued_total = trained + outstanding <= (version + K + 1) * B; what it refuses of
    what `prefetch_batches` wants is the step's `held_prompts` (the most any top-up held)."""
    p = cls(1, 2)
    assert (p.most_outstanding(6), p.most_outstanding(2)) == (4, 2)  # what `notes` reads
    p.begin_step()
    assert p.admit(0, trained=0, outstanding=0, wanted=6) == 4  # K + 1 batches of 2
    assert p.metrics()["async/stale/held_prompts"] == 2
    assert p.admit(0, trained=0, outstanding=3, wanted=3) == 1  # a drop gave its slot back
    assert p.metrics()["async/stale/held_prompts"] == 2
    p.begin_step()
    assert p.admit(1, trained=2, outstanding=2, wanted=2) == 2  # the default depth: all
    assert p.metrics()["async/stale/held_prompts"] == 0
    assert p.admit(1, trained=2, outstanding=5, wanted=1) == 0  # never negative
    assert p.admit(4, trained=8, outstanding=0, wanted=3) == 3  # resumed at step 5


def test_drop_admits_what_prefetch_asks_and_never_reissues() -> None:
    p = DropStale(1, 2)
    assert p.most_outstanding(6) == 6
    p.begin_step()
    assert p.admit(0, trained=0, outstanding=0, wanted=6) == 6
    assert not p.due(5, 0)
    assert p.on_stale() is False and p.on_stale() is False
    assert p.metrics() == {"async/stale/dropped_groups": 2.0}


def test_pace_drops_and_refills() -> None:
    p = PaceIssues(2, 2)
    p.begin_step()
    assert not p.due(5, 0)
    assert p.on_stale() is True
    assert p.metrics() == {
        "async/stale/dropped_groups": 1.0,
        "async/stale/refilled_groups": 1.0,
    }


def test_wait_owes_the_groups_issued_k_versions_ago() -> None:
    """Left for the next step, a group issued at version v - K could be K + 1 behind: the
    step that updates v must take it. The issue version bounds the oldest token from below,
    so taken now it is at most K behind."""
    p = WaitForStragglers(2, 2)
    assert [p.due(5, issued) for issued in (2, 3, 4, 5)] == [True, True, False, False]
    p.begin_step()
    p.waited(0.25, 2)
    p.begin_step()
    p.waited(0.0, 0)
    assert p.metrics() == {
        "async/stale/dropped_groups": 0.0,
        "async/stale/waited_groups": 2.0,
        "async/stale/wait_s": 0.0,
    }


def test_too_stale_reads_the_oldest_sampled_token() -> None:
    p = PaceIssues(1, 2)
    assert oldest(_group(3, 4)) == 3 and oldest(_group()) > 1 << 40
    assert not p.too_stale(4, _group(3, 5)) and p.too_stale(4, _group(2, 5))
    assert not p.too_stale(4, _group())  # nothing sampled: nothing stale


def test_counters_survive_a_checkpoint() -> None:
    p = PaceIssues(1, 2)
    p.on_stale()
    saved = p.state()
    resumed = PaceIssues(1, 2)
    resumed.load_state(saved | {"waited_groups": 7.0})  # another policy's counter: ignored
    assert resumed.state() == {"dropped_groups": 1.0, "refilled_groups": 1.0}
    other = WaitForStragglers(1, 2)
    other.load_state(saved)
    assert other.state() == {"dropped_groups": 1.0, "waited_groups": 0.0}


# ---------------------------------------------------------------- the collector, scripted
class ScriptedProducer:
    """A `GroupProducer` whose groups finish when a script says: `script[i]` lists the
    prompts that finish right after the i-th submission (in that order, so the collector
    sees them finish in that order; the prompt just submitted can only be listed last: the
    collector hooks its future once it is returned). A group's tokens carry the engine's
    update count at its submission, as if it decoded before the next sync."""

    reports_versions = True

    def __init__(self, script: dict[int, list[int]]) -> None:
        self.script, self.weight_version = script, 0
        self.submitted: list[int] = []
        self.futures: dict[int, tuple[concurrent.futures.Future[TrajectoryGroup], int]] = {}
        self.recorded: dict[int, list[Any]] = {}  # what `in_flight` reports of a group
        self.resumed: dict[int, list[Any]] = {}  # the `resume` each group was submitted with

    def start(self) -> None:
        pass

    def in_flight(self) -> dict[str, list[Any]]:
        """What `recorded` says of a running group's episode (default: nothing, it restarts)."""
        running = [k for k, (f, _) in self.futures.items() if not f.done()]
        return {f"p{k}-": self.recorded.get(k, [None]) for k in running}

    def submit_group(
        self, task: Any, position: int, n: int, key: str, resume: Any = ()
    ) -> concurrent.futures.Future[TrajectoryGroup]:
        k = int(key[1:-1])  # "p{k}-"
        fut: concurrent.futures.Future[TrajectoryGroup] = concurrent.futures.Future()
        self.futures[k], self.resumed[k] = (fut, self.weight_version), list(resume)
        self.submitted.append(k)
        finishing = self.script.get(len(self.submitted) - 1, [])
        assert k not in finishing[:-1], "the prompt just submitted finishes last"
        for done in finishing:
            f, version = self.futures[done]
            kept = self.resumed[done]  # kept finished episodes come back as they were
            done_all = kept and all(isinstance(t, Trajectory) for t in kept)
            f.set_result(TrajectoryGroup("g", kept) if done_all else _group(version, version))
        return fut


def _collector(
    staleness: str, script: dict[int, list[int]], **cfg: Any
) -> tuple[PipelinedCollector, ScriptedProducer]:
    producer = ScriptedProducer(script)
    a = AsyncConfig(max_staleness=1, staleness=staleness, **cfg)  # type: ignore[arg-type]
    policy = POLICIES[staleness](1, 2)
    data = TaskSource(DataConfig(), seed=0)
    c = PipelinedCollector(producer, data, 1, 2, a, policy, concurrency=8, engine_batch=8)
    return c, producer


def _step(c: PipelinedCollector, producer: ScriptedProducer, step: int) -> list[int]:
    """Sync (the engine's count moves to the policy being updated), then one batch: the
    prompts it trains."""
    producer.weight_version = step - 1
    return [g.trajectories[0].metadata["prompt_index"] for g in c.next_batch(step, QUIET)]


def _stale(c: PipelinedCollector) -> dict[str, float]:
    return {k.removeprefix("async/stale/"): v for k, v in c.policy.metrics().items()}


def test_wait_takes_what_it_owes_and_holds_what_finished_early() -> None:
    """K = 1, B = 2, the default depth (2 batches). Step 2 owes prompts 0 and 1 (issued at
    version 0); 4 finishes first and is held; it and 5 are step 3's batch."""
    c, producer = _collector("wait", {3: [2, 3], 5: [4, 0, 1, 5], 7: [6, 7]})
    c.start(0)
    assert _step(c, producer, 1) == [2, 3]
    assert _stale(c) == {"dropped_groups": 0, "waited_groups": 0, "held_prompts": 0, "wait_s": 0}
    assert _step(c, producer, 2) == [0, 1]
    assert c.pending == [4, 5] and list(c.held) == [4]
    assert c.state()["async_pending"] == [4, 5]
    m = _stale(c)
    assert m["waited_groups"] == 2 and m["dropped_groups"] == 0 and m["wait_s"] >= 0
    assert _step(c, producer, 3) == [4, 5]  # owed now: taken at once, 4 first (held)
    assert _stale(c)["waited_groups"] == 2 and _stale(c)["wait_s"] == 0
    assert producer.submitted == [0, 1, 2, 3, 4, 5, 6, 7]
    c.close()
    assert c.pending == [6, 7] and not c.held


def test_wait_fails_clearly_when_an_owed_group_never_finishes() -> None:
    """Two other groups finished, but the step owes prompt 0: it waits, boundedly."""
    c, producer = _collector("wait", {3: [2, 3], 5: [4, 1, 5]}, batch_timeout_s=0.2)
    c.start(0)
    assert _step(c, producer, 1) == [2, 3]
    with pytest.raises(TimeoutError, match="trainer.async.batch_timeout_s=0.2s"):
        _step(c, producer, 2)
    c.close()


def test_pace_issues_k_plus_one_batches_and_refills_a_straggler_first() -> None:
    """`prefetch_batches: 3` with K = 1: 4 prompts, not 6, are issued. Prompt 0 finishes at
    step 3 with version-0 tokens (2 behind): dropped, and issued again before anything new."""
    c, producer = _collector("pace", {3: [2, 3], 5: [1, 4], 7: [0], 8: [5, 6]}, prefetch_batches=3)
    c.start(0)
    assert _step(c, producer, 1) == [2, 3] and producer.submitted == [0, 1, 2, 3]
    assert _stale(c)["held_prompts"] == 2
    assert _step(c, producer, 2) == [1, 4]
    assert _step(c, producer, 3) == [5, 6]
    assert producer.submitted == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    assert _stale(c) == {"dropped_groups": 1, "refilled_groups": 1, "held_prompts": 2}
    assert c.pending == [0, 7]  # the re-issued prompt is pending again


def test_drop_never_issues_a_prompt_twice() -> None:
    """No admission: 6 prompts issued at step 1. At step 3 prompts 0 and 5 (issued at
    version 0) are 2 behind: discarded, not pending, and new prompts take their place."""
    c, producer = _collector(
        "drop", {5: [2, 3], 7: [1, 4], 9: [0, 5, 6], 11: [7]}, prefetch_batches=3
    )
    c.start(0)
    assert _step(c, producer, 1) == [2, 3] and producer.submitted == [0, 1, 2, 3, 4, 5]
    assert _step(c, producer, 2) == [1, 4]
    assert _step(c, producer, 3) == [6, 7]
    assert producer.submitted == list(range(12))
    assert _stale(c) == {"dropped_groups": 2}
    assert c.pending == [8, 9, 10, 11] and c.state()["async_pending"] == [8, 9, 10, 11]


@pytest.mark.parametrize("staleness", ["drop", "pace", "wait"])
def test_a_resumed_collector_issues_pending_prompts_first_and_continues_counters(
    staleness: str,
) -> None:
    c, producer = _collector(staleness, {1: [5, 3]})
    c.load_state({"async_pending": [5, 3], "async_stale_counts": {"dropped_groups": 3.0}})
    c.data.cursor = 8
    c.start(4)  # resumed after step 4: 8 prompts trained
    assert _step(c, producer, 5) == [5, 3]
    assert producer.submitted == [5, 3, 8, 9]  # K + 1 batches, the pending ones first
    assert _stale(c)["dropped_groups"] == 3
    assert c.pending == [8, 9]


def test_a_checkpoint_keeps_the_episodes_in_flight_in_policy_versions() -> None:
    """Prompts 0 and 1 run when step 1's checkpoint is taken; the producer reports 0's
    episode finished (sampled under engine count 5 = policy version 0). The resumed process's
    engine counts from 0 (offset -1): the kept episode is issued first, comes back as it was,
    and is trained with its policy version 0, not mistaken for env tokens; 1 restarts."""
    c, producer = _collector("wait", {3: [2, 3]})
    producer.weight_version = 5
    c.start(0)
    producer.weight_version = 5
    assert [g.trajectories[0].metadata["prompt_index"] for g in c.next_batch(1, QUIET)] == [2, 3]
    producer.recorded[0] = _group(5, 5).trajectories
    saved = c.state()
    kept = saved["async_inflight"]
    assert sorted(kept) == [0, 1] and kept[1] == {"issued_at": 0, "episodes": [None]}
    (episode,) = kept[0]["episodes"]
    assert kept[0]["issued_at"] == 0 and episode.weight_versions == [0, 0, -1]
    c.close()

    resumed, producer = _collector("wait", {1: [0, 1]})
    resumed.load_state(saved)
    resumed.data.cursor = 4  # the checkpoint's cursor: prompts 0-3 issued
    assert (
        "1 finished episodes kept" in resumed.notes[-1] and "1 started again" in resumed.notes[-1]
    )
    resumed.start(1)  # the new engine's count is 0: offset -1
    assert _step(resumed, producer, 2)[:2] == [0, 1]
    assert producer.resumed[0] == [episode] and producer.resumed[1] == [None]
    assert resumed.metrics(2, [], {})["async/resume/kept"] == 1
    assert resumed.metrics(2, [], {})["async/resume/restarted"] == 1
    assert resumed.state()["async_resume_counts"]["kept"] == 1
