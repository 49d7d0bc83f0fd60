"""ReMax from a config: the trainer rolls out one greedy episode per prompt and hands its
(shaped) reward to `compute_advantages` as `baseline_rewards` on every row of that prompt's
group, also when DAPO dynamic sampling assembles the batch from several collects.

Real components throughout (tiny models, real envs, real engine); the only stand-ins are
pass-through spies that record what the real methods returned.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_synth import train_overrides, trajectory

from agentrl.algorithms import get_estimator, overlong_penalty
from agentrl.assembly import build_trainer
from agentrl.config import AlgorithmConfig, RolloutConfig, TrainConfig, load_config
from agentrl.trainer import trainer as trainer_module
from agentrl.trainer.roles import GREEDY_BASELINE, RewardScorer
from agentrl.types import TrajectoryGroup

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # the fine-tuned calc agent

from agent_model import agent_path  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _cfg(cache: Path, out: Path, **extra: object) -> TrainConfig:
    overrides = train_overrides(cache, out, algorithm__adv_estimator="remax", **extra)
    return load_config(TrainConfig, None, overrides)


def _spy(obj: Any, name: str, calls: list[tuple[tuple, Any]], mp: pytest.MonkeyPatch) -> None:
    """Wrap `obj.name`: the real method runs; its arguments and result go to `calls`."""
    real = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:  # kwargs: e.g. the progress hook
        out = real(*args, **kwargs)
        calls.append((args, out))
        return out

    mp.setattr(obj, name, wrapper)


def test_estimators_declare_the_greedy_baseline() -> None:
    assert get_estimator("remax").greedy_baseline  # declared in its registry entry
    assert not get_estimator("grpo").greedy_baseline and not get_estimator("gae").greedy_baseline


def test_remax_train_run_logs_the_baseline(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`algorithm.adv_estimator=remax` trains end to end, with one sample per prompt (ReMax
    needs no group), and logs the greedy baseline every step."""
    cfg = _cfg(tiny_model_dir.parent, tmp_path, trainer__steps=2, rollout__n=1)
    result = build_trainer(cfg).train()
    assert result["episodes"] == 2
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert isinstance(r["remax/baseline_reward"], float)
        assert r["time/rollout"] > 0


def test_dapo_refills_keep_each_groups_greedy_baseline(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calc agent's episodes vary in length, so overlong shaping gives varied rewards:
    DAPO drops some groups and refills from later collects, and greedy baselines differ by
    prompt. Each row must reach `compute_advantages` with the greedy reward of its own prompt,
    shaped like the samples, and get advantage R − b."""
    cfg = _cfg(
        tiny_model_dir.parent,
        tmp_path,
        model__path=str(agent_path()),
        data__env="math/calc-easy-v0",
        data__batch_size=6,
        data__eval_episodes=0,
        sampling__max_new_tokens=48,
        rollout__max_total_tokens=400,
        algorithm__overlong_buffer=150,
        algorithm__dynamic_sampling="true",
        algorithm__max_resample_batches=4,
    )
    trainer = build_trainer(cfg)
    collected: list[tuple[tuple, Any]] = []  # (items, n) -> (sampled groups, greedy groups)
    batched: list[tuple[tuple, Any]] = []
    computed: list[tuple[tuple, Any]] = []
    _spy(trainer.c.rollout, "collect_with_greedy", collected, monkeypatch)
    _spy(trainer.c.scorer, "batch", batched, monkeypatch)
    _spy(trainer_module, "compute_advantages", computed, monkeypatch)
    try:
        metrics = trainer.train_step()
    finally:
        trainer.finish()

    assert len(collected) >= 2, "expected DAPO to refill from a second collect"
    own: dict[int, float] = {}  # id(sampled group) -> its prompt's greedy reward (shaped)
    for (items, _), (groups, refs) in collected:
        assert len(refs) == len(groups) == len(items)
        for g, ref in zip(groups, refs, strict=True):
            (ep,) = ref.trajectories
            assert ep.metadata["seed"] == g.trajectories[0].metadata["seed"]
            length = torch.tensor([len(ep.prompt_ids) + len(ep.response_ids)])
            pen = overlong_penalty(length, 400, 150, cfg.algorithm.overlong_penalty).item()
            assert ep.metadata["overlong_penalty"] == pytest.approx(pen)
            own[id(g)] = ep.reward
    [((final,), batch)] = batched
    assert len({g.group_id.split("-")[0] for g in final}) >= 2, "batch spans several collects"
    want = torch.tensor([own[id(g)] for g in final for _ in g.trajectories])
    assert want.unique().numel() >= 2, "baselines should differ between prompts"
    [((inp, _), _)] = computed
    torch.testing.assert_close(inp.baseline_rewards, want)
    assert metrics["remax/baseline_reward"] == pytest.approx(float(want.mean()))
    score = batch.token_rewards.sum(-1)
    torch.testing.assert_close(batch.advantages, (score - want)[:, None] * batch.response_mask)


def test_sharded_rollout_forwards_greedy(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Under torchrun the local placement wraps the rollout in `ShardedRollout`; its greedy
    baseline keeps item order (here one rank, so it must equal the inner rollout's)."""
    from agentrl.workers.sharded import ShardedRollout

    trainer = build_trainer(_cfg(tiny_model_dir.parent, tmp_path, data__eval_episodes=0))
    try:
        sharded = ShardedRollout(trainer.c.rollout, trainer.c.backend)
        items = trainer.c.data.next_batch()
        want = trainer.c.rollout.collect_greedy(items)
        # Samples and greedy episodes together: same greedy episodes, groups in item order.
        groups, got = sharded.collect_with_greedy(items, 2)
        assert [g.trajectories[0].metadata["seed"] for g in got] == items
        assert [g.trajectories[0].response_ids for g in got] == [
            g.trajectories[0].response_ids for g in want
        ]
        assert [g.trajectories[0].metadata["seed"] for g in groups] == items
        assert [len(g.trajectories) for g in groups] == [2] * len(items)
    finally:
        trainer.finish()


def _group(seed: int, rewards: list[float], rng: random.Random) -> TrajectoryGroup:
    trajs = [trajectory(rng, 2, r) for r in rewards]
    for t in trajs:
        t.metadata["seed"] = seed
    return TrajectoryGroup(f"c1-seed{seed}", trajs)


def test_scorer_shapes_and_stamps_the_greedy_episode() -> None:
    """Unit level: the greedy episode gets the samples' overlong shaping before it becomes the
    baseline of every row of its group; a baseline from another task is refused."""
    rng = random.Random(0)
    groups = [_group(0, [1.0, 0.0], rng), _group(1, [0.0, 0.0, 1.0], rng)]
    refs = [_group(0, [1.0], rng), _group(1, [0.5], rng)]
    lengths = [
        len(r.trajectories[0].prompt_ids) + len(r.trajectories[0].response_ids) for r in refs
    ]
    scorer = RewardScorer(
        AlgorithmConfig(adv_estimator="remax", overlong_buffer=8),
        RolloutConfig(max_total_tokens=max(lengths) + 2),
        pad_id=0,
    )
    pen = overlong_penalty(torch.tensor(lengths), max(lengths) + 2, 8, 1.0)
    assert bool((pen < 0).any())
    scorer.attach_greedy_baseline(groups, refs)
    got = scorer.baseline_rewards(groups)
    want = torch.tensor([1.0, 0.5]) + pen
    torch.testing.assert_close(got, want.repeat_interleave(torch.tensor([2, 3])))
    assert all(
        t.metadata[GREEDY_BASELINE] == refs[1].trajectories[0].reward
        for t in groups[1].trajectories
    )

    with pytest.raises(ValueError, match="another task"):
        scorer.attach_greedy_baseline(groups, refs[::-1])
    with pytest.raises(ValueError, match="1 episodes for 2 groups"):
        scorer.attach_greedy_baseline(groups, refs[:1])
    with pytest.raises(ValueError, match="no greedy baseline"):
        scorer.baseline_rewards([_group(2, [0.0], rng)])


def test_dynamic_sampling_keeps_tied_groups_that_differ_from_their_baseline() -> None:
    """Samples that all tie still carry signal under ReMax when the greedy reward differs;
    a group whose samples and baseline all agree is dropped."""
    rng = random.Random(1)
    groups = [_group(0, [1.0, 1.0], rng), _group(1, [0.0, 0.0], rng), _group(2, [0.0, 1.0], rng)]
    refs = [_group(0, [0.0], rng), _group(1, [0.0], rng), _group(2, [0.0], rng)]
    algo = AlgorithmConfig(adv_estimator="remax", dynamic_sampling=True)
    scorer = RewardScorer(algo, RolloutConfig(), pad_id=0)
    scorer.attach_greedy_baseline(groups, refs)
    kept = scorer.keep_informative(groups)
    assert [g.group_id for g in kept] == [groups[0].group_id, groups[2].group_id]
    grpo = RewardScorer(AlgorithmConfig(dynamic_sampling=True), RolloutConfig(), pad_id=0)
    plain = [_group(0, [1.0, 1.0], rng), _group(2, [0.0, 1.0], rng)]
    assert [g.group_id for g in grpo.keep_informative(plain)] == [plain[1].group_id]


def test_ray_placement_runs_remax(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`trainer.placement=ray`: the driver-side `RayRollout` forwards `collect_with_greedy` to the
    rollout worker, so ReMax trains the same way there."""
    ray = pytest.importorskip("ray")
    from agentrl.workers.ray_proxies import RayRollout

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        trainer = build_trainer(_cfg(tiny_model_dir.parent, tmp_path, trainer__placement="ray"))
        try:
            assert isinstance(trainer.c.rollout, RayRollout)
            m = trainer.train_step()
            assert isinstance(m["remax/baseline_reward"], float)
        finally:
            trainer.finish()
    finally:
        ray.shutdown()
