"""Off-policy PPO trains through the real pipelined `Trainer` on CPU: two steps of
`trainer.async.max_staleness: 1` on the tiny calc agent (real env, real engine), so step 2
trains on tokens sampled while step 1 updated.

- decoupled with an IcePop token mask, two mini-batches (so π_old comes from its own forward
  and the second mini-batch's π_θ has moved away from it): finite loss, moved weights, the
  behaviour-weight and mask metrics logged every step.
- bypass: the old-log-prob forward is skipped (no π_old/π_rollout spread is logged) and no
  behaviour weight either; the loss still trains.

Rewards of these short runs may all tie, so an entropy bonus guarantees a gradient; the
losses' values are pinned by tests/algorithms/test_offpolicy.py.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
import trainer_synth
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import AlgorithmConfig, TrainConfig, TrainerConfig, load_config
from agentrl.trainer.actor import Actor, old_forward_needed

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # the fine-tuned calc agent

from agent_model import agent_path  # noqa: E402

pytestmark = pytest.mark.timeout(600)

CASES = {
    "decoupled+icepop": {
        "algorithm__off_policy": "decoupled",
        "algorithm__behav_weight_cap": 5.0,
        "algorithm__rollout_mask": "token",
        "algorithm__rollout_mask_low": 0.2,
        "algorithm__rollout_mask_high": 5.0,
        "trainer__mini_batch_size": 2,
    },
    "bypass": {"algorithm__off_policy": "bypass", "trainer__mini_batch_size": 2},
}


def _cfg(cache: Path, out: Path, **extra: object) -> TrainConfig:
    overrides = train_overrides(
        cache,
        out,
        model__path=str(agent_path()),
        data__eval_episodes=0,
        sampling__max_new_tokens=48,
        rollout__max_total_tokens=400,
        algorithm__overlong_buffer=150,
        algorithm__entropy_coef=0.05,  # a gradient even when a step's rewards all tie
        trainer__steps=2,
        trainer__save_every=0,
        trainer__async__max_staleness=1,
        **extra,
    )
    return load_config(TrainConfig, None, overrides)


@pytest.mark.parametrize("case", sorted(CASES))
def test_off_policy_modes_train_pipelined(tiny_model_dir: Path, tmp_path: Path, case: str) -> None:
    cfg = _cfg(tiny_model_dir.parent, tmp_path, **CASES[case])
    bypass = cfg.algorithm.off_policy == "bypass"
    assert old_forward_needed(cfg.algorithm, cfg.trainer, 4) is not bypass
    trainer = build_trainer(cfg)
    before = {k: v.detach().clone() for k, v in trainer.actor.model.state_dict().items()}
    trainer.train()
    after = trainer.actor.model.state_dict()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert max(float((after[k] - before[k]).abs().max()) for k in before) > 0
    assert rows[1]["async/staleness_max"] == 1  # step 2 trained on tokens one version old
    for r in rows:
        if bypass:
            assert not any(k.startswith("offpolicy/") for k in r)
            assert "async/is_ratio_min" not in r  # no π_old was computed (is_spread)
            continue
        assert "async/is_ratio_min" in r
        assert 0 <= r["offpolicy/behav_masked_frac"] <= 1
        assert r["offpolicy/behav_weight_mean"] > 0 and r["offpolicy/behav_kl"] >= 0
        assert 0 <= r["offpolicy/mask_token_frac"] < 1
        assert 0 <= r["offpolicy/mask_seq_frac"] <= 1
    if not bypass:  # the stale step's behaviour weights are not all 1
        assert rows[1]["offpolicy/behav_weight_max"] > 1


def test_old_forward_needed_only_where_the_update_reads_pi_old() -> None:
    one, two = TrainerConfig(mini_batch_size=4), TrainerConfig(mini_batch_size=2)
    cases = [
        ({}, one, False),  # one on-policy pass: π_old is the update's own, detached
        ({}, two, True),
        ({"tis_mode": "token"}, one, True),
        ({"off_policy": "decoupled"}, one, False),  # the proximal is exact for free
        ({"off_policy": "decoupled"}, two, True),
        ({"off_policy": "decoupled", "rollout_mask": "geometric"}, one, True),
        ({"off_policy": "bypass"}, two, False),
    ]
    for keys, trainer, want in cases:
        assert old_forward_needed(AlgorithmConfig(**keys), trainer, 4) is want, keys
    no_reuse = TrainerConfig(mini_batch_size=4, reuse_on_policy_log_probs=False)
    assert old_forward_needed(AlgorithmConfig(), no_reuse, 4)


def test_rejection_mask_leaves_the_callers_batch_alone() -> None:
    b = trainer_synth.batch([2, 2])
    gen = torch.Generator().manual_seed(0)
    b.old_log_probs = b.rollout_log_probs + 0.3 * torch.randn(
        b.rollout_log_probs.shape, generator=gen
    )
    before = b.response_mask.clone()
    algo = AlgorithmConfig(rollout_mask="token", rollout_mask_low=0.8, rollout_mask_high=1.25)
    masked, metrics = Actor.rejection_masked(b, algo)
    assert torch.equal(b.response_mask, before)
    rho = (b.old_log_probs - b.rollout_log_probs).exp()
    keep = ((rho >= 0.8) & (rho <= 1.25)).to(before.dtype)
    assert torch.equal(masked.response_mask, before * keep)
    assert 0 < metrics["offpolicy/mask_token_frac"] < 1
    b.old_log_probs = None
    with pytest.raises(ValueError, match="needs the old log-probs"):
        Actor.rejection_masked(b, algo)
