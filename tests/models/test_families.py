"""Every model family agentrl ships a tiny preset for runs the whole RL path on CPU.

Per family: a rollout through `RolloutRunner` + `HFEngine` on math/calc-easy-v0 whose engine
logprobs match the trainer's recomputation (token exactness holds for that architecture's
attention/cache), then one `Trainer` step from `model.path=tiny:<preset>` after which the
engine's weights equal the actor's (weight sync covers every parameter name).
"""

from __future__ import annotations

import pytest
import torch

from agentrl.assembly import build_trainer
from agentrl.chat import ChatFormat
from agentrl.config import RolloutConfig, SamplingConfig, TrainConfig, load_config
from agentrl.engines import HFEngine
from agentrl.envs import make
from agentrl.models.load import load_model, load_tokenizer
from agentrl.rollout import RolloutRunner
from agentrl.trainer import collate
from agentrl.trainer.logprobs import response_log_probs

FAMILIES = ["qwen2", "qwen3", "llama", "gemma2", "deepseek_v3", "qwen2_moe"]


def _rollout_matches_trainer(preset: str) -> None:
    cfg = load_config(TrainConfig, None, [f"model.path=tiny:{preset}"])
    tok = load_tokenizer(cfg.model)
    model = load_model(cfg.model, trainable=False)
    chat = ChatFormat(tok)
    runner = RolloutRunner(
        HFEngine(model, tok),
        chat,
        lambda: make("math/calc-easy-v0"),
        RolloutConfig(n=2, max_turns=2, max_total_tokens=256),
        SamplingConfig(max_new_tokens=12),
        seed=0,
    )
    try:
        groups = runner.collect_sync([0], 2)
    finally:
        runner.close(close_engine=True)
    batch = collate(groups, tok.pad_token_id)
    assert batch.size == 2 and batch.response_mask.sum() > 0
    with torch.no_grad():
        logp, _ = response_log_probs(model, batch)
    gap = ((logp - batch.rollout_log_probs).abs() * batch.response_mask).max()
    assert float(gap) < 1e-4, f"{preset}: engine/trainer logprob gap {float(gap)}"


def _one_rl_step(preset: str, tmp_path) -> None:
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path=tiny:{preset}",
            "trainer.steps=1",
            "trainer.device=cpu",
            "trainer.tensorboard=false",
            f"trainer.out_dir={tmp_path}",
            "data.batch_size=1",
            "data.eval_episodes=0",
            "rollout.n=2",
            "rollout.max_turns=2",
            "sampling.max_new_tokens=6",
            "optim.lr=1e-2",
            # All-zero rewards give GRPO zero advantages; the entropy bonus still moves weights.
            "algorithm.entropy_coef=0.1",
        ],
    )
    trainer = build_trainer(cfg)
    before = {k: v.clone() for k, v in trainer.actor.named_weights()}
    trainer.train()
    after = dict(trainer.actor.named_weights())
    assert any(not torch.equal(before[k], after[k]) for k in after), "update changed nothing"
    engine_state = trainer.c.rollout.engine.model.state_dict()
    for name, tensor in after.items():
        assert torch.equal(engine_state[name], tensor), f"{preset}: {name} not synced"


@pytest.mark.parametrize("preset", FAMILIES)
def test_family_rollout_and_rl_step(preset: str, tmp_path) -> None:
    _rollout_matches_trainer(preset)
    _one_rl_step(preset, tmp_path)
