"""examples/count_vowels.py, the worked example of docs/write-an-env.md: the env passes
`check_env` (its oracle reaches full reward), and the documented training command runs
end to end with the shipped recipe, shrunk (its full-size learning run is in the doc)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "count_vowels.py"
RECIPE = ROOT / "configs" / "my-env-cpu.yaml"


def test_env_checks_and_tool_counts():
    from agentrl.envs import check_env, load_env_module, make

    load_env_module(EXAMPLE)
    env = make("demo/count-vowels-v0")
    try:
        report = check_env(env)
        assert report["oracle"] and report["tools"] == ["count_vowels"]
        obs, _ = env.reset(seed=3)
        word = env.task.info["word"]
        assert word in obs.messages[-1].content
        assert env.task.answer == str(sum(c in "aeiou" for c in word))
    finally:
        env.close()


def test_documented_command_trains(tmp_path, agentrl_cache, capsys):
    from agentrl.cli import main

    out = tmp_path / "run"
    argv = ["train", "--config", str(RECIPE), "--env-module", str(EXAMPLE)]
    argv += ["--env", "demo/count-vowels-v0", f"trainer.out_dir={out}"]
    argv += [f"model.cache_dir={agentrl_cache}", "sft.steps=3", "sft.demos=8", "trainer.steps=1"]
    argv += [
        "data.batch_size=2",
        "rollout.n=2",
        "data.eval_episodes=4",
        "trainer.tensorboard=false",
    ]
    assert main(argv) == 0
    assert "held-out success" in capsys.readouterr().out
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals] == [0, 1] and evals[-1]["episodes"] == 4
    assert (out / "checkpoints" / "latest").read_text() == "step_000001"
