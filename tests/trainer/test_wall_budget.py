"""`trainer.max_wall_s`: once the budget is spent no new RL step starts (one always runs), and
the run still ends as after its last step: final held-out eval, checkpoint, `final/`, summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import ConfigError, TrainConfig, load_config

pytestmark = pytest.mark.timeout(300)


def test_a_spent_budget_stops_after_the_first_step_and_finishes_the_run(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = train_overrides(
        tiny_model_dir.parent, tmp_path, trainer__steps=5, trainer__max_wall_s=1e-6,
        data__eval_episodes=2,
    )  # fmt: skip
    after = build_trainer(load_config(TrainConfig, None, overrides)).train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "time/update" in r] == [1]
    evals = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1]  # before RL, and the final one at step 1
    assert after["episodes"] == 2
    assert all(e["tool_calls/episode"] >= 0 for e in evals)  # tool calls per held-out episode
    assert (tmp_path / "final" / "config.json").exists()
    assert (tmp_path / "checkpoints" / "step_000001").is_dir()
    out = capsys.readouterr().out
    assert "stopped on budget at step 1 of 5" in out.replace("\n", " ")


def test_a_negative_budget_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_wall_s"):
        load_config(TrainConfig, None, train_overrides(tmp_path, tmp_path, trainer__max_wall_s=-1))
