"""Every shipped CPU recipe runs one RL step (tiny budgets); the GPU template only validates.

`tests/core/test_config.py` proves each `configs/*.yaml` loads; this proves the algorithm
settings in each one fit together (e.g. a critic with KL-in-reward, GSPO's sequence loss,
DAPO's resampling) on the env it names.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.recipes import SelfPlayTrainConfig

CONFIGS = Path(__file__).parents[2] / "configs"
CPU_RECIPES = ["grpo-calc", "ppo-gae-calc", "dapo-calc", "gspo-calc", "rloo-search"]
TINY = [
    "trainer.steps=1",
    "trainer.device=cpu",
    "trainer.tensorboard=false",
    "trainer.eval_every=0",
    "data.batch_size=2",
    "data.eval_episodes=0",
    "rollout.n=2",
    "rollout.max_turns=2",
    "sampling.max_new_tokens=8",
    "sft.steps=0",
    "algorithm.max_resample_batches=1",
]


@pytest.mark.parametrize("name", CPU_RECIPES)
def test_cpu_recipe_runs_one_step(name: str, tmp_path: Path) -> None:
    cfg = load_config(TrainConfig, CONFIGS / f"{name}.yaml", [*TINY, f"trainer.out_dir={tmp_path}"])
    trainer = build_trainer(cfg)
    if cfg.algorithm.adv_estimator == "gae":
        assert trainer.c.critic is not None
    trainer.train()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"loss"' in lines[0]


def test_gpu_template_points_at_a_local_checkpoint() -> None:
    cfg = load_config(TrainConfig, CONFIGS / "qwen2.5-0.5b-gpu.yaml")
    assert cfg.model.path.startswith("/") and cfg.trainer.device == "cuda"
    assert cfg.model.dtype == "bfloat16" and cfg.engine.kind == "vllm"
    tokens = cfg.data.batch_size * cfg.rollout.n
    assert tokens % cfg.trainer.mini_batch_size == 0  # whole mini-batches per step
    assert math.isclose(cfg.optim.lr, 1e-6)


@pytest.mark.parametrize(
    "path", sorted((CONFIGS / "selfplay").glob("*.yaml")), ids=lambda p: p.stem
)
def test_selfplay_configs_load(path: Path) -> None:
    cfg = load_config(SelfPlayTrainConfig, path)
    assert cfg.selfplay.method == path.stem.split("-")[0]
