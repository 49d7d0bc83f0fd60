"""Each estimator/loss family added for verl parity trains through the real `Trainer`: one
step of rollout → advantages → update on the tiny calc agent (real env, real engine), with a
finite loss and moved weights. The adaptive KL controller moves the coefficient between steps
and is restored from a checkpoint.

Rewards vary inside a group through DAPO's overlong shaping (the agent's episodes differ in
length), so group-relative advantages are non-zero and the update has a gradient.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # the fine-tuned calc agent

from agent_model import agent_path  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _cfg(cache: Path, out: Path, **extra: object) -> TrainConfig:
    overrides = train_overrides(
        cache,
        out,
        model__path=str(agent_path()),
        data__eval_episodes=0,
        sampling__max_new_tokens=48,
        rollout__max_total_tokens=400,
        algorithm__overlong_buffer=150,
        **extra,
    )
    return load_config(TrainConfig, None, overrides)


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.actor.model.state_dict().items()}


CASES = {
    "passk+sapo": {"algorithm__adv_estimator": "grpo_passk", "algorithm__policy_loss": "sapo"},
    "gpg+gpg": {"algorithm__adv_estimator": "gpg", "algorithm__policy_loss": "gpg"},
    # Two mini-batches: π_old comes from its own pass, which the Σπ² pass accompanies.
    "otb+ppo": {
        "algorithm__adv_estimator": "optimal_token_baseline",
        "trainer__mini_batch_size": 2,
    },
    "clip_cov": {
        "algorithm__policy_loss": "clip_cov",
        "algorithm__clip_cov_ratio": 0.2,
        "algorithm__clip_cov_lb": -100.0,
    },
    "kl_cov+token-sum": {
        "algorithm__policy_loss": "kl_cov",
        "algorithm__loss_agg_mode": "token-sum",
    },
    "gmpo+sum-norm": {
        "algorithm__policy_loss": "geo_mean",
        "algorithm__loss_agg_mode": "seq-mean-token-sum-norm",
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_new_family_trains_one_step(tiny_model_dir: Path, tmp_path: Path, case: str) -> None:
    trainer = build_trainer(_cfg(tiny_model_dir.parent, tmp_path, **CASES[case]))
    try:
        before = _weights(trainer)
        metrics = trainer.train_step()
        after = _weights(trainer)
    finally:
        trainer.finish()
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])
    assert metrics["grad_norm"] > 0
    moved = max(float((after[k] - before[k]).abs().max()) for k in before)
    assert moved > 0, f"{case}: the update did not change the weights"


@pytest.mark.parametrize(("estimator", "placement"), [("gae", "reward"), ("grpo", "loss")])
def test_adaptive_kl_moves_and_resumes_the_coefficient(
    tiny_model_dir: Path, tmp_path: Path, estimator: str, placement: str
) -> None:
    """An adaptive controller with a short horizon, for verl's in-reward KL (with gae, whose
    advantages are whitened by default) and for the KL loss term: the logged coefficient
    changes between steps as Ziegler's rule says, and a resumed run continues from the
    checkpointed coefficient."""
    extra = {
        "algorithm__adv_estimator": estimator,
        "algorithm__kl__coef": 0.05,
        "algorithm__kl__placement": placement,
        "algorithm__kl__estimator": "k1",
        "algorithm__kl__ctrl": "adaptive",
        "algorithm__kl__target_kl": 1e-4,
        "algorithm__kl__horizon": 10,
        "trainer__steps": 2,
        "trainer__save_every": 1,
    }
    cfg = _cfg(tiny_model_dir.parent, tmp_path, **extra)
    build_trainer(cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    coefs = [r["kl/coef"] for r in rows]
    assert coefs[0] == pytest.approx(0.05)
    kl = rows[0]["kl_seq_mean"]
    error = max(min(kl / 1e-4 - 1, 0.2), -0.2)
    assert coefs[1] == pytest.approx(0.05 * (1 + error * 4 / 10))  # 4 trajectories per step
    assert all(math.isfinite(r["loss"]) for r in rows)
    resumed = build_trainer(cfg)  # the checkpoint of step 2 holds the coefficient after it
    try:
        resumed.load_checkpoint()
        want = coefs[1] * (1 + max(min(rows[1]["kl_seq_mean"] / 1e-4 - 1, 0.2), -0.2) * 0.4)
        assert resumed.kl_ctrl.value == pytest.approx(want)
    finally:
        resumed.finish()
