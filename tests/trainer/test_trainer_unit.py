"""Trainer unit tests: collate on multi-turn trajectories, micro-batch invariance of the
update, TaskSource determinism over seeds and rows, checkpoint atomicity. The row reader's
errors are tested in tests/rows/."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from trainer_synth import batch, configs

from agentrl.backends import TorchBackend
from agentrl.config import DataConfig, OptimConfig
from agentrl.trainer.actor import Actor
from agentrl.trainer.batch import collate
from agentrl.trainer.checkpoint import Checkpointer
from agentrl.trainer.data import TaskSource
from agentrl.types import Trajectory, TrajectoryGroup, Turn

PAD = 0


def _two_turns() -> Trajectory:
    """prompt 5 6 7 | turn 0: 10 11 | obs 20 | turn 1: 12 13 14 | trailing obs 21 22."""
    t = Trajectory(prompt_ids=[5, 6, 7], reward=1.0)
    t.append([10, 11], trained=True, logprobs=[-0.1, -0.2])
    t.append([20], trained=False)
    t.append([12, 13, 14], trained=True, logprobs=[-0.3, -0.4, -0.5])
    t.append([21, 22], trained=False)
    t.turns = [
        Turn(start=0, end=2, obs_end=3, reward=0.3),
        Turn(start=3, end=6, obs_end=8, reward=0.7),
    ]
    t.validate()
    return t


def _one_turn() -> Trajectory:
    t = Trajectory(prompt_ids=[8, 9], reward=0.0)
    t.append([30, 31], trained=True, logprobs=[-1.0, -2.0])
    t.turns = [Turn(start=0, end=2, obs_end=2)]
    return t


def _groups() -> list[TrajectoryGroup]:
    return [TrajectoryGroup("a", [_two_turns()]), TrajectoryGroup("b", [_one_turn(), _one_turn()])]


def test_collate_multi_turn_layout() -> None:
    b = collate(_groups(), PAD)
    assert b.input_ids.shape == (3, 11) and b.responses.shape == (3, 8)
    assert b.input_ids[0].tolist() == [5, 6, 7, 10, 11, 20, 12, 13, 14, 21, 22]
    assert b.input_ids[1].tolist() == [8, 9, 30, 31] + [PAD] * 7
    assert b.attention_mask.sum(1).tolist() == [11, 4, 4]
    assert b.logit_index[0].tolist() == list(range(2, 10))  # prompt_len - 1 + j
    assert b.logit_index[1].tolist() == [1, 2] + [-1] * 6
    assert b.response_mask[0].tolist() == [1, 1, 0, 1, 1, 1, 0, 0]
    assert b.rollout_log_probs[0].tolist() == pytest.approx([-0.1, -0.2, 0, -0.3, -0.4, -0.5, 0, 0])
    assert b.turn_index[0].tolist() == [0, 0, -1, 1, 1, 1, -1, -1]
    assert b.group_index.tolist() == [0, 1, 1] and b.rewards.tolist() == [1.0, 0.0, 0.0]
    # The logit at logit_index[i, j] is the one that predicts responses[i, j].
    for i in range(b.size):
        for j in range(b.responses.shape[1]):
            if b.logit_index[i, j] >= 0:
                assert b.input_ids[i, b.logit_index[i, j] + 1] == b.responses[i, j]


def test_collate_reward_placement() -> None:
    episode = collate(_groups(), PAD, reward_on="episode").token_rewards[0].tolist()
    assert episode == [0, 0, 0, 0, 0, 1.0, 0, 0]  # last *sampled* token, not the trailing obs
    turn = collate(_groups(), PAD, reward_on="turn").token_rewards[0].tolist()
    assert turn == pytest.approx([0, 0.3, 0, 0, 0, 0.7, 0, 0])  # each turn's last sampled token


def test_select_trims_padding_columns() -> None:
    sub = collate(_groups(), PAD).select([2, 1])
    assert sub.input_ids.shape == (2, 4) and sub.responses.shape == (2, 2)
    assert sub.group_index.tolist() == [1, 1]


def _updated(model_dir: Path, micro: int, mode: str, **algo_kw: object) -> dict[str, torch.Tensor]:
    """Parameters after one real `Actor.update`. SGD instead of AdamW: Adam's first step is
    about lr·sign(g), which turns float noise on near-zero gradients into lr-sized
    differences; with SGD the parameters are linear in the accumulated gradient."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    # No clipping: it rescales both runs to one norm and would hide a weighting error.
    algo, optim, trainer = configs(
        mini_batch_size=6, micro_batch_size=micro, mode=mode, grad_clip=1e9
    )
    actor = Actor(model, TorchBackend("cpu"), replace(algo, **algo_kw), optim, trainer)
    actor.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    actor.scheduler = torch.optim.lr_scheduler.LambdaLR(actor.optimizer, lambda _: 1.0)
    b = batch([2, 2, 2])
    b.old_log_probs = actor.compute_log_probs(b) + 0.05 * b.response_mask  # ratios ≠ 1
    actor.update(b, torch.Generator().manual_seed(0))
    return {k: v.clone() for k, v in model.state_dict().items()}


MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"]
MODES += ["seq-mean-token-sum-norm"]
# Losses that aggregate their own way, with an entropy term aggregated by loss_agg_mode: each
# term must be weighted by its own mode's share.
FIXED = [
    ("token-mean", {"policy_loss": "gspo", "entropy_coef": 0.01}),
    ("token-sum", {"policy_loss": "geo_mean", "entropy_coef": 0.01}),
    ("seq-mean-token-sum", {"policy_loss": "sapo"}),
]


@pytest.mark.parametrize(
    ("mode", "algo_kw"),
    [(m, {}) for m in MODES] + FIXED,
    ids=MODES + [f"{kw['policy_loss']}-{mode}" for mode, kw in FIXED],
)
def test_micro_batch_size_does_not_change_the_update(
    tiny_model_dir: Path, mode: str, algo_kw: dict
) -> None:
    from transformers import AutoModelForCausalLM

    one = _updated(tiny_model_dir, 1, mode, **algo_kw)
    full = _updated(tiny_model_dir, 6, mode, **algo_kw)
    start = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).state_dict()
    moved = max(float((full[k] - start[k]).abs().max()) for k in full)
    assert moved > 1e-3  # it moved
    tol = 1e-6 * max(moved, 1.0)  # float32 rounding grows with the step (token-sum: ~40x)
    for name in full:
        torch.testing.assert_close(one[name], full[name], atol=tol, rtol=0, msg=name)


class _TwoRanks(TorchBackend):
    rank, world_size = 1, 2


def test_micro_plan_pads_short_shards() -> None:
    """Rank 1 of 2 holds 2 of 5 rows (1 micro of 2) but must run rank 0's 2 micro-batches."""
    actor = object.__new__(Actor)
    actor.backend, actor.cfg = _TwoRanks("cpu"), configs(micro_batch_size=2)[2]
    rows = [7, 9]
    assert actor._micro_plan(rows, 5) == [[7, 9], []]
    assert actor._micro_plan(rows, 4) == [[7, 9]]


def test_task_source_is_deterministic_and_resumable(tmp_path: Path) -> None:
    cfg = DataConfig(batch_size=3)
    a, b = TaskSource(cfg, seed=7), TaskSource(cfg, seed=7)
    assert a.next_batch() + a.next_batch() == b.next_batch(6)
    resumed = TaskSource(cfg, seed=7)
    resumed.cursor = 3
    assert resumed.next_batch() == TaskSource(cfg, seed=7).next_batch(6)[3:]
    assert TaskSource(cfg, seed=8).next_batch() != TaskSource(cfg, seed=7).next_batch()
    assert not set(a.eval_items(5)) & set(TaskSource(cfg, seed=0).next_batch(100))

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": i}) + "\n" for i in range(4)))
    ds = DataConfig(env="math/boxed-v0", path=str(rows), batch_size=4)
    epoch0, epoch1 = TaskSource(ds, 1).next_batch(), TaskSource(ds, 1).next_batch(8)[4:]
    assert sorted(r.data["prompt"] for r in epoch0) == ["p0", "p1", "p2", "p3"]  # each row once
    assert sorted(r.data["prompt"] for r in epoch1) == ["p0", "p1", "p2", "p3"]
    assert epoch0 == TaskSource(ds, 1).next_batch()


def test_checkpoint_ignores_leftover_tmp(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, keep=2)
    for step in (1, 2):
        ck.save(step, {"cursor": step * 10})
    # A kill mid-save leaves a partial temp dir and pointer; both must be ignored.
    (ck.root / ".tmp_step_000003").mkdir()
    (ck.root / ".tmp_step_000003" / "state.pt").write_bytes(b"truncated")
    (ck.root / "latest.tmp").write_text("step_000003")
    assert ck.latest() == ck.root / "step_000002"
    state = ck.load()
    assert state is not None and state["step"] == 2 and state["cursor"] == 20
    ck.save(3, {"cursor": 30})  # the next save replaces the leftover and prunes old steps
    assert sorted(p.name for p in ck.root.iterdir() if p.is_dir()) == ["step_000002", "step_000003"]
    assert ck.load()["cursor"] == 30  # type: ignore[index]


def test_checkpoint_restores_rng(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path)
    ck.save(1, {})
    want = torch.rand(3)
    ck.load()
    assert torch.equal(torch.rand(3), want)


def test_resumed_actor_uses_the_configured_optimizer_settings(tiny_model_dir: Path) -> None:
    """`--resume` with a new `optim.lr` (betas, weight decay, warmup): the loaded optimizer
    keeps its moments and step count but runs with the config's values, as verl does."""
    from transformers import AutoModelForCausalLM

    def actor(optim: OptimConfig) -> Actor:
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
        algo, _, trainer = configs(mini_batch_size=6)
        return Actor(model, TorchBackend("cpu"), algo, optim, trainer, total_steps=10)

    old = actor(OptimConfig(lr=1e-3))
    b = batch([2, 2, 2])
    b.old_log_probs = old.compute_log_probs(b)
    old.update(b, torch.Generator().manual_seed(0))
    new_cfg = OptimConfig(lr=3e-4, betas=(0.8, 0.95), weight_decay=0.1, warmup_steps=4)
    new = actor(new_cfg)
    new.load_state(old.state())
    assert new.optimizer.state_dict()["state"]  # Adam's moments come back from the checkpoint
    assert new.scheduler.last_epoch == 1  # so does the schedule's position: warmup 2/4
    (group,) = new.optimizer.param_groups
    assert group["lr"] == pytest.approx(3e-4 * 2 / 4) and group["initial_lr"] == 3e-4
    assert group["betas"] == (0.8, 0.95) and group["weight_decay"] == 0.1
    assert new.scheduler.get_last_lr() == [pytest.approx(3e-4 * 2 / 4)]
    metrics = new.update(b, torch.Generator().manual_seed(0))
    assert metrics["lr"] == pytest.approx(3e-4 * 3 / 4)


@pytest.mark.parametrize("reward_on", ["episode", "turn"])
def test_collate_matches_a_row_by_row_reference(reward_on: str) -> None:
    """Random multi-turn trajectories (some with no sampled token, some with turn rewards):
    every tensor equals one built row by row from the trajectory's own lists."""
    import random

    from trainer_synth import trajectory

    rng = random.Random(3)
    trajs = [trajectory(rng, rng.randint(1, 4), rng.random()) for _ in range(24)]
    for t in trajs[::5]:
        t.turns = [replace(turn, reward=0.0) for turn in t.turns]
    trajs.append(Trajectory(prompt_ids=[4, 5], reward=0.5))  # nothing sampled
    groups = [TrajectoryGroup(str(i), trajs[i : i + 5]) for i in range(0, len(trajs), 5)]
    b = collate(groups, PAD, reward_on=reward_on)
    for i, t in enumerate(x for g in groups for x in g.trajectories):
        p, r = len(t.prompt_ids), len(t.response_ids)
        assert b.input_ids[i, : p + r].tolist() == t.input_ids
        assert b.input_ids[i, p + r :].eq(PAD).all() and b.attention_mask[i].sum() == p + r
        assert b.responses[i, :r].tolist() == t.response_ids
        assert b.response_mask[i, :r].tolist() == [float(m) for m in t.loss_mask]
        assert b.rollout_log_probs[i, :r].tolist() == pytest.approx(t.logprobs)
        assert b.logit_index[i].tolist() == [
            p - 1 + j if j < r else -1 for j in range(b.responses.shape[1])
        ]
        want_turn = [-1] * b.responses.shape[1]
        want_reward = [0.0] * b.responses.shape[1]
        for k, turn in enumerate(t.turns):
            want_turn[turn.start : turn.end] = [k] * (turn.end - turn.start)
            if reward_on == "turn" and turn.end > turn.start:
                want_reward[turn.end - 1] = turn.reward
        if not any(want_reward):
            sampled = [j for j, m in enumerate(t.loss_mask) if m]
            want_reward = [0.0] * len(want_reward)
            if sampled:
                want_reward[sampled[-1]] = t.reward
        assert b.turn_index[i].tolist() == want_turn
        assert b.token_rewards[i].tolist() == pytest.approx(want_reward)


def test_collate_names_a_row_whose_lists_disagree() -> None:
    """A trajectory whose loss mask or logprobs do not match its response length is an error
    naming it; the batch's flat build must never shift values into a neighbouring row."""
    good, bad = _one_turn(), _one_turn()
    bad.loss_mask.append(0)
    with pytest.raises(ValueError, match=r"trajectory 1 \(group 0\) has 3 loss_mask entries"):
        collate([TrajectoryGroup("a", [good, bad])], PAD)
    good, bad = _one_turn(), _one_turn()
    bad.logprobs.pop()
    with pytest.raises(ValueError, match="has 1 logprobs entries for 2 response tokens"):
        collate([TrajectoryGroup("a", [good]), TrajectoryGroup("b", [bad])], PAD)
