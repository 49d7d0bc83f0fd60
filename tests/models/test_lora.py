"""LoRA: RL updates only adapter weights, and the engine samples from the merged model."""

from __future__ import annotations

import torch

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.models.load import load_model, plain_model
from agentrl.trainer import Trainer


def _lora_trainer(tmp_path) -> Trainer:
    cfg = load_config(
        TrainConfig,
        None,
        [
            "model.path=tiny:qwen2",
            "model.lora.enabled=true",
            "model.lora.r=4",
            "model.lora.alpha=8",
            "model.lora.target_modules=[q_proj, v_proj, o_proj]",
            "trainer.steps=1",
            "trainer.device=cpu",
            "trainer.tensorboard=false",
            f"trainer.out_dir={tmp_path}",
            "data.batch_size=1",
            "data.eval_episodes=0",
            "rollout.n=2",
            "sampling.max_new_tokens=6",
            "optim.lr=0.05",
            "algorithm.entropy_coef=0.1",  # a gradient even when every reward is 0
        ],
    )
    return build_trainer(cfg)


def test_lora_step_trains_adapters_and_engine_gets_merged_weights(tmp_path) -> None:
    trainer = _lora_trainer(tmp_path)
    policy = trainer.actor.model
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    trainer.train()
    changed = {n for n, p in policy.named_parameters() if not torch.equal(before[n], p)}
    assert changed, "the LoRA step changed nothing"
    assert changed <= trainable, f"non-adapter weights changed: {sorted(changed - trainable)[:3]}"

    engine = trainer.c.rollout.engine.model
    names = list(engine.state_dict())
    assert not any("lora_" in n or "base_model" in n or "base_layer" in n for n in names)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250]])
    policy.eval()
    with torch.no_grad():
        peft_logits = policy(input_ids=ids).logits
        engine_logits = engine(input_ids=ids).logits
        with policy.disable_adapter():
            base_logits = policy(input_ids=ids).logits
    assert torch.allclose(engine_logits, peft_logits, atol=1e-5)
    assert not torch.allclose(engine_logits, base_logits, atol=1e-4)
    assert torch.allclose(plain_model(policy)(input_ids=ids).logits, peft_logits, atol=1e-5)


def test_all_linear_targets_every_projection() -> None:
    cfg = load_config(
        TrainConfig, None, ["model.lora.enabled=true", "model.lora.target_modules=[all-linear]"]
    )
    model = load_model(cfg.model)
    wrapped = {
        n.split(".lora_A")[0].split(".")[-1] for n, _ in model.named_parameters() if "lora_A" in n
    }
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= wrapped
