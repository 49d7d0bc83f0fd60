"""Dataset rows on the default `tiny:` model learn nothing (0% -> 0%); the command says so
and points at a real-model recipe for rows (issue 42, part 2, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.cli._common import ROWS_RECIPE

ROOT = Path(__file__).resolve().parents[2]


def test_rows_on_a_tiny_model_warn_and_name_the_recipe(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(agentrl_cache))
    rows = tmp_path / "rows.jsonl"
    row = {"prompt": [{"role": "user", "content": "What is 2+3?"}], "answer": "5"}
    rows.write_text(json.dumps(row) + "\n")
    argv = ["rollout", "--env", "math/boxed-v0", "--data", str(rows), "--model", "tiny:qwen2"]
    argv += ["--episodes", "1", "--n", "1", "--max-new-tokens", "4", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "t.jsonl")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: dataset rows on tiny:qwen2, a random-init test model" in err
    assert ROWS_RECIPE in err and "smollm2-135m-instruct" in err


def test_the_rows_recipe_is_a_real_model_on_a_rows_env() -> None:
    from agentrl.assembly.validate import load_train_config
    from agentrl.envs import spec

    cfg = load_train_config(ROOT / ROWS_RECIPE, ["data.path=train.parquet"])
    assert cfg.model.path == "smollm2-135m-instruct" and spec(cfg.data.env).takes_rows()
