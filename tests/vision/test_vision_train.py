"""One GRPO step end to end on a vision env with the tiny VLM (`model.enable_vision=true`)."""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.engines.hf_vision import HFVisionEngine


def test_grpo_step_on_vision_env(tmp_path: Path, tiny_vlm_dir: Path, vlm_preset: str) -> None:
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.path=tiny-vlm:{vlm_preset}",
            "model.enable_vision=true",
            f"model.cache_dir={tiny_vlm_dir.parent}",  # the fixture's build is reused
            "data.env=vision/count-shapes-v0",
            "data.batch_size=2",
            "data.eval_episodes=0",
            "rollout.n=2",
            "rollout.max_turns=1",
            "sampling.max_new_tokens=6",
            "trainer.steps=1",
            "trainer.device=cpu",
            "trainer.tensorboard=false",
            f"trainer.out_dir={tmp_path}",
            "optim.lr=1e-2",
            # All-zero rewards give GRPO zero advantages; the entropy bonus still moves weights.
            "algorithm.entropy_coef=0.1",
        ],
    )
    trainer = build_trainer(cfg)
    engine = trainer.c.rollout.engine
    assert isinstance(engine, HFVisionEngine)
    before = {k: v.clone() for k, v in trainer.actor.named_weights()}
    captured = []
    collect = trainer.c.rollout.collect
    trainer.c.rollout.collect = lambda *a, **k: captured.extend(collect(*a, **k)) or captured  # type: ignore[method-assign]
    trainer.train()
    trajs = [t for g in captured for t in g.trajectories]
    assert len(trajs) == 4 and all(t.multimodal.get("images") for t in trajs)
    assert all(t.termination in ("done", "overlong") for t in trajs), [t.metadata for t in trajs]
    after = dict(trainer.actor.named_weights())
    changed = [k for k in after if not torch.equal(before[k], after[k])]
    assert any("visual" in k for k in changed), "the vision tower got no update"
    engine_state = engine.model.state_dict()
    for name, tensor in after.items():
        assert torch.equal(engine_state[name], tensor), f"{name} not synced to the engine"
