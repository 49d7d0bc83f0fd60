"""Infrastructure failures leave the loss and the group statistics, not the record.

The advantage of every trained row equals a hand computation over its group's valid episodes
only; the group-drop rule (fewer than 2 valid runs for group-relative estimators, 0
otherwise; a split harness episode's segments are one run, the rule the harness collector
shares: tests/harness/test_harness_train.py runs it there);
DAPO's filter does not count a failure's fake 0; and a real training run on a real env whose
episodes fail for infrastructure reasons logs the counts, trains the rest and keeps the
failures in the rollout dump.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides, trajectory

from agentrl.algorithms import AdvantageInput, compute_advantages
from agentrl.algorithms.advantages import GROUP_EPS
from agentrl.assembly import build_trainer
from agentrl.cli import main
from agentrl.config import AlgorithmConfig, RolloutConfig, TrainConfig, load_config
from agentrl.trainer.batch import collate
from agentrl.trainer.exclusion import exclude_infra_failures, runs, trainable
from agentrl.trainer.roles import RewardScorer
from agentrl.types import TerminationReason, Trajectory, TrajectoryGroup, read_jsonl

pytestmark = pytest.mark.timeout(300)


def _group(
    name: str, episodes: list[tuple[float, TerminationReason]], seed: int
) -> TrajectoryGroup:
    rng = random.Random(seed)
    trajs = []
    for reward, reason in episodes:
        t = trajectory(rng, rng.randint(1, 3), reward)
        t.termination = reason
        trajs.append(t)
    return TrajectoryGroup(name, trajs)


def _groups() -> list[TrajectoryGroup]:
    return [
        # 4 samples, one lost to an engine abort (its 0 is no score)
        _group("a", [(1.0, "done"), (0.0, "engine_error"), (0.5, "done"), (0.0, "max_turns")], 1),
        # 2 of 3 lost: one valid left
        _group("b", [(0.0, "sandbox_error"), (1.0, "done"), (0.0, "timeout")], 2),
        # untouched; a policy outcome (invalid calls) is trained
        _group("c", [(1.0, "done"), (0.0, "invalid_tool_calls"), (1.0, "done")], 3),
        # every sample lost
        _group("d", [(0.0, "env_error"), (0.0, "agent_crash")], 4),
    ]


def test_group_relative_drops_groups_left_with_fewer_than_two() -> None:
    split = exclude_infra_failures(_groups(), group_relative=True)
    assert [g.group_id for g in split.groups] == ["a", "c"]
    assert [len(g.trajectories) for g in split.groups] == [3, 3]
    assert all(not t.infra_failed for g in split.groups for t in g.trajectories)
    reasons = sorted(str(t.metadata["left_out"]) for t in split.left_out)
    assert reasons == ["group_dropped"] + ["infra"] * 5  # b's survivor goes with its group
    m = split.metrics
    assert m["infra/excluded"] == 5 and m["infra/left_out"] == 6
    assert m["infra/groups_dropped"] == 2 and m["infra/groups_shrunk"] == 1
    assert m["termination_count/done"] == 5 and m["termination_count/engine_error"] == 1
    assert m["termination_count/invalid_tool_calls"] == 1


def test_other_estimators_keep_a_single_valid_episode() -> None:
    split = exclude_infra_failures(_groups(), group_relative=False)
    assert [(g.group_id, len(g.trajectories)) for g in split.groups] == [
        ("a", 3),
        ("b", 1),
        ("c", 3),
    ]
    assert split.metrics["infra/groups_dropped"] == 1 and split.metrics["infra/left_out"] == 5


def _segments(episode: str, n: int, reason: TerminationReason, seed: int) -> list[Trajectory]:
    """`n` segments of one harness episode: they share its id and its reward."""
    segs = _group("", [(1.0, reason)] * n, seed).trajectories
    for t in segs:
        t.metadata |= {"episode": episode, "episode_segments": n}
    return segs


def test_a_split_episode_is_one_run() -> None:
    """Group s holds one finished episode in 2 segments beside a failed run: one run left,
    dropped whole under a group-relative estimator (its segments are not 2 samples); group
    t's 2 finished runs (one split in 3) train untouched."""
    s = TrajectoryGroup("s", [*_segments("s-0", 2, "done", 8), *_segments("s-1", 1, "timeout", 9)])
    t = TrajectoryGroup("t", [*_segments("t-0", 3, "done", 10), *_segments("t-1", 1, "done", 11)])
    assert runs(t.trajectories) == ["t-0", "t-1"] and len(runs(s.trajectories)) == 2
    assert not trainable(s.trajectories[:2], group_relative=True)
    assert trainable(s.trajectories[:2], group_relative=False)
    split = exclude_infra_failures([s, t], group_relative=True)
    assert split.groups == [t] and split.groups[0] is t
    assert sorted(str(x.metadata["left_out"]) for x in split.left_out) == [
        "group_dropped", "group_dropped", "infra"
    ]  # fmt: skip
    assert split.metrics["infra/groups_dropped"] == 1
    kept = exclude_infra_failures([s, t], group_relative=False).groups
    assert [(g.group_id, len(g.trajectories)) for g in kept] == [("s", 2), ("t", 4)]


def test_built_in_episodes_are_a_run_each() -> None:
    """No `metadata["episode"]`: every trajectory is its own run (the built-in rollouts)."""
    g = _groups()[0]
    assert len(runs(g.trajectories)) == 4
    assert trainable(g.trajectories[:2], group_relative=True)
    assert not trainable(g.trajectories[:1], group_relative=True)


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_advantages_equal_a_hand_computation_over_valid_episodes(estimator: str) -> None:
    groups = _groups()
    split = exclude_infra_failures(groups, group_relative=True)
    batch = collate(split.groups, pad_id=0)
    algo = AlgorithmConfig(adv_estimator=estimator)  # type: ignore[arg-type]
    inp = AdvantageInput(batch.token_rewards, batch.response_mask, batch.group_index)
    adv, _ = compute_advantages(inp, algo)
    got = [float(row[mask > 0][0]) for row, mask in zip(adv, batch.response_mask, strict=True)]
    want = []
    for g in groups[0], groups[2]:  # a and c
        rewards = [t.reward for t in g.trajectories if t.termination not in _INFRA]
        for r in rewards:
            if estimator == "grpo":
                want.append(
                    (r - statistics.mean(rewards)) / (statistics.stdev(rewards) + GROUP_EPS)
                )
            else:
                want.append(r - (sum(rewards) - r) / (len(rewards) - 1))
    assert got == pytest.approx(want, abs=1e-5)
    # what the failure's fake 0 would have done to group a under GRPO
    a_all = [t.reward for t in groups[0].trajectories]
    assert statistics.mean(a_all) != pytest.approx(statistics.mean([1.0, 0.5, 0.0]))


_INFRA = {"engine_error", "sandbox_error", "timeout", "env_error", "agent_crash", "tool_error"}


def test_dynamic_sampling_does_not_count_a_failures_zero() -> None:
    """Group a's valid rewards all tie at 1; only its engine error's fake 0 makes it look
    informative. DAPO drops it; group b (1 vs 0, both valid) stays."""
    a = _group("a", [(1.0, "done"), (0.0, "engine_error"), (1.0, "done")], 5)
    b = _group("b", [(1.0, "done"), (0.0, "max_tokens"), (0.0, "timeout")], 6)
    c = _group("c", [(0.0, "timeout"), (0.0, "timeout")], 7)
    scorer = RewardScorer(AlgorithmConfig(dynamic_sampling=True), RolloutConfig(), pad_id=0)
    assert [g.group_id for g in scorer.keep_informative([a, b, c])] == ["b"]


FLAKY_ENV = """
from agentrl.envs import register, spec
from agentrl.envs.math.calc import CalcEnv
from agentrl.types import InfraError

FAILS = {0: 1, 1: 3}  # seed -> how many of its resets fail (the first ones)


class FlakyCalc(CalcEnv):
    def reset(self, *, seed=None, options=None):
        if FAILS.get(seed, 0) > 0:
            FAILS[seed] -= 1
            raise InfraError("sandbox_error", f"node lost (seed {seed})")
        return super().reset(seed=seed, options=options)


register("test/flaky-calc-v0", FlakyCalc, **spec("math/calc-easy-v0").kwargs)
"""


def test_a_run_trains_on_the_rest_and_keeps_the_failures_on_disk(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 0 loses 1 of 3 episodes (its group shrinks to 2), seed 1 loses all 3 (dropped):
    one group of 2 trains, the 4 failures are counted and dumped for the viewer."""
    module = tmp_path / "flaky_env.py"
    module.write_text(FLAKY_ENV)
    out = tmp_path / "run"
    overrides = train_overrides(
        tiny_model_dir.parent,
        out,
        data__env="test/flaky-calc-v0",
        data__env_modules=f"[{module}]",
        data__eval_episodes=0,
        rollout__n=3,
        trainer__dump_rollouts_every=1,
    )
    trainer = build_trainer(load_config(TrainConfig, None, overrides))
    trainer.train()
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["infra/excluded"] == 4 and row["termination_count/sandbox_error"] == 4
    assert row["infra/groups_dropped"] == 1 and row["infra/groups_shrunk"] == 1
    assert row["groups"] == 1 and "time/update" in row  # the shrunk group trained
    assert row["termination/sandbox_error"] == pytest.approx(4 / 6)
    assert {"span/rollout/generate", "span/rollout/env"} <= set(row)
    assert main(["runs", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "infra failures (left out)" in shown and "4 episodes, 1 groups dropped" in shown
    dumped = list(read_jsonl(out / "rollouts" / "step_000001.jsonl"))
    assert len(dumped) == 6
    trained = [t for t in dumped if "left_out" not in t.metadata]
    assert len(trained) == 2 and all("trainer_logprobs" in t.metadata for t in trained)
    left = [t for t in dumped if "left_out" in t.metadata]
    assert sorted(t.metadata["left_out"] for t in left) == ["infra"] * 4
    assert all(
        t.termination == "sandbox_error" and "node lost" in t.metadata["error"] for t in left
    )


def test_a_step_with_nothing_left_skips_its_update(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    overrides = train_overrides(
        tiny_model_dir.parent,
        out,
        data__eval_episodes=0,
        rollout__episode_timeout_s=1e-6,  # every episode times out (the machine's failure)
        trainer__dump_rollouts_every=1,
    )
    trainer = build_trainer(load_config(TrainConfig, None, overrides))
    before = {k: v.clone() for k, v in trainer.actor.named_weights()}
    trainer.train()
    after = dict(trainer.actor.named_weights())
    assert all(torch.equal(before[k], after[k]) for k in before)
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["infra/excluded"] == 4 and row["infra/groups_dropped"] == 2
    assert "time/update" not in row and "groups" not in row
    dumped = list(read_jsonl(out / "rollouts" / "step_000001.jsonl"))
    assert [t.termination for t in dumped] == ["timeout"] * 4
    assert all(isinstance(t, Trajectory) and t.metadata["left_out"] == "infra" for t in dumped)
