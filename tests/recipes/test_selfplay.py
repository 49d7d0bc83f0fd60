"""SPIN and SPPO: one iteration each on a tiny model, plus the win-probability estimate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import parity_env  # noqa: F401 - registers test/parity-v0
import pytest
import torch

from agentrl.cli import main
from agentrl.config import load_config
from agentrl.models.load import load_model
from agentrl.recipes import SelfPlayTrainConfig
from agentrl.recipes.sppo import SPPO, win_probabilities

CONFIGS = Path(__file__).parents[2] / "configs" / "selfplay"
TINY = [
    "model.path=tiny:qwen2",
    "sft.steps=0",
    "selfplay.iterations=1",
    "selfplay.epochs=2",
    "sampling.max_new_tokens=8",
    "rollout.max_turns=2",
    "data.eval_episodes=0",
    "trainer.tensorboard=false",
    "optim.lr=1e-3",
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_win_probabilities_count_ties_half_and_skip_self() -> None:
    p = win_probabilities(torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.5, 1.0]]))
    expected = torch.tensor([[1.0, 0.25, 0.25], [0.5, 0.5, 0.5], [0.0, 0.5, 1.0]])
    assert torch.allclose(p, expected)
    with pytest.raises(ValueError, match="rollout.n >= 2"):
        win_probabilities(torch.zeros(2, 1))


def test_spin_iteration_from_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "spin"
    args = ["selfplay", "--config", str(CONFIGS / "spin-cpu.yaml"), *TINY]
    args += ["selfplay.prompts_per_iteration=4", "selfplay.batch_size=2", f"trainer.out_dir={out}"]
    assert main(args) == 0
    (row,) = _rows(out / "metrics.jsonl")
    # The policy starts equal to the previous iterate: margin 0, loss log 2.
    assert row["loss/first"] == pytest.approx(math.log(2), abs=1e-5)
    assert row["reward/demos"] == 1.0 and row["optimizer_steps"] == 4
    assert row["loss/last"] != row["loss/first"]
    cfg = load_config(SelfPlayTrainConfig, None, [f"model.path={out / 'final'}"])
    assert load_model(cfg.model, trainable=False).config.model_type == "qwen2"


def test_sppo_iteration_moves_winners_against_the_previous_iterate(tmp_path: Path) -> None:
    overrides = [*TINY, "data.env=test/parity-v0", "rollout.n=4", f"trainer.out_dir={tmp_path}"]
    # Stop strings end a random model's turn early, so the env scores (and parity splits) it.
    overrides += ["sampling.stop=[a, e, o]", "sampling.max_new_tokens=16"]
    overrides += ["selfplay.prompts_per_iteration=3", "selfplay.batch_size=6", "selfplay.eta=2.0"]
    cfg = load_config(SelfPlayTrainConfig, CONFIGS / "sppo-cpu.yaml", overrides)
    recipe = SPPO(cfg)
    before = {k: v.clone() for k, v in recipe.actor.named_weights()}
    recipe.run()
    (row,) = _rows(tmp_path / "metrics.jsonl")
    assert row["win_prob/abs_dev"] > 0, "parity rewards should split every group"
    assert torch.allclose(recipe.win.view(3, 4).mean(1), torch.full((3,), 0.5))
    target = 2.0 * (recipe.win - 0.5)
    # First step: log-ratio 0, so the loss is the mean squared target of its mini-batch.
    assert 0 < row["loss/first"] <= float(target.square().max()) + 1e-6
    # After the updates, winners gained probability relative to π_prev, losers lost it.
    ratio = recipe.sequence_logps(recipe.samples, grad=False) - recipe.prev
    assert float((ratio * target).sum()) > 0
    after = dict(recipe.actor.named_weights())
    assert any(not torch.equal(before[k], after[k]) for k in after)
    engine = recipe.c.rollout.engine.model.state_dict()
    assert all(torch.equal(engine[k], v) for k, v in after.items())
