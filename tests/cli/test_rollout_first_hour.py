"""`agentrl rollout` as a new user runs it (issue 42, part 2, item 1).

A run where most episodes time out fails loudly (exit 1, the warning first) and its rows say
which episodes the clock ended (`metadata.scored` false, left out of the reward); `--config`
takes a recipe's model, env, env kwargs and sampling; `--env-kwargs` reaches the env;
`--help` shows the defaults and the real-model presets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli import main

pytestmark = pytest.mark.timeout(300)


def rows(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_most_episodes_timing_out_fails_loudly(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(agentrl_cache))
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--env", "math/calc-easy-v0", "--model", "tiny:qwen2", "--n", "2"]
    argv += ["--episodes", "2", "--timeout", "0.0001", "--out", str(out), "--device", "cpu"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    said = [ln for ln in err.splitlines() if ln.strip() and "━" not in ln and "Loading" not in ln]
    assert said[0].startswith("warning: 4 of 4 episodes timed out"), err
    assert "reward n/a (nothing scored) over 0 scored" in err
    got = rows(out)
    assert [r["termination"] for r in got] == ["timeout"] * 4
    assert [r["metadata"]["scored"] for r in got] == [False] * 4


def test_config_reuses_a_recipe_and_env_kwargs_reach_the_env(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model:\n  path: tiny:qwen2\n  cache_dir: {agentrl_cache}\n"
        "data:\n  env: math/calc-easy-v0\n  env_kwargs:\n    n_operands: 2\n"
        "sampling:\n  temperature: 0.0\n  max_new_tokens: 5\nrollout:\n  n: 2\n"
    )
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--config", str(recipe), "--episodes", "2", "--out", str(out)]
    assert main([*argv, "--device", "cpu", "--env-kwargs", '{"max_value": 9}']) == 0
    err = capsys.readouterr().err
    assert "timed out" not in err and "over 4 scored" in err
    got = rows(out)
    assert len(got) == 4  # the recipe's n=2
    assert all(r["metadata"]["scored"] for r in got)
    # The recipe's max_new_tokens (5) bounds every sampled turn.
    assert all(t["end"] - t["start"] <= 5 for r in got for t in r["turns"])
    # The env kwargs: 2 operands (recipe), at most 9 (flag) in the task text.
    import re

    task = next(m["content"] for m in got[0]["messages"] if m["role"] == "user")
    numbers = [int(x) for x in re.findall(r"\d+", task)]
    assert len(numbers) == 2 and max(numbers) <= 9, task
    # A flag given wins over the recipe.
    assert main([*argv, "--device", "cpu", "--n", "3"]) == 0
    assert len(rows(out)) == 6


def test_rollout_help_shows_defaults_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rollout", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "smollm2-135m-instruct" in text and "tiny:qwen2" in text
    for default in ("(default: 4)", "(default: 64)", "(default: 2048)", "(default: 1.0)"):
        assert default in text
    assert "none when --temperature 0" in text
