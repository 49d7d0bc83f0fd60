"""smolagents' `ToolCallingAgent` (examples/harness/smolagents_calc.py), unchanged, on the gateway.

Real parts: smolagents 1.26 with `OpenAIServerModel` in a child process, the gateway over the
hf engine on the tiny random model (smolagents' `tool_choice="required"` is enforced by the
gateway's grammar, so even this model calls a tool), the math env's grader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("smolagents", reason="the harness venv: bash scripts/setup-harness.sh")
pytest.importorskip("llguidance", reason="tool_choice needs the serve extra")

from gateway_episode import assert_token_exact, run_episode  # noqa: E402

from agentrl.cli import main  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def test_one_episode_is_recorded_token_exact(agentrl_cache: Path) -> None:
    """smolagents' tool calls are parsed from the model's own syntax, executed (calculator or
    its final_answer tool), and the episode is scored by the env's grader; each turn is
    recorded exactly as the engine was given and sampled it."""
    ep, calls = run_episode(agentrl_cache, "math/calc-easy-v0", "tiny_agents:smol")
    assert ep.failure is None, ep.record.metadata.get("error")
    assert ep.record.reward in (0.0, 1.0)
    assert_token_exact(ep.segments, calls)
    sent = [m for seg in ep.segments for m in seg.messages]
    called = [c.name for m in sent if m.role == "assistant" for c in m.tool_calls]
    assert called and set(called) <= {"calculator", "final_answer"}  # parsed, in OpenAI form
    assert len(calls) >= 2  # smolagents ran the first call and asked again with its outcome
    assert any(seg.metadata.get("constrained_turns") for seg in ep.segments)  # "required"


def test_agentrl_train_runs_smolagents(agentrl_cache: Path, tmp_path: Path) -> None:
    """`agentrl train --agent ... --env math/calc-easy-v0`: two GRPO steps, no infra failure."""
    out = tmp_path / "run"
    args = ["train", "--agent", "tiny_agents:smol", "--env", "math/calc-easy-v0"]
    sets = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": agentrl_cache,
        "data.batch_size": 2,
        "rollout.n": 2,
        "rollout.concurrency": 4,
        "trainer.tensorboard": "false",
        "trainer.steps": 2,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 4,
        "trainer.out_dir": out,
        "sft.steps": 0,
        "data.eval_episodes": 0,
        "rollout.harness.timeout_s": 400,
    }
    assert main([*args, *(f"{k}={v}" for k, v in sets.items())]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["harness/infra_failed"] == 0 and r["harness/episodes"] == 4
        assert r["loss"] == r["loss"]  # finite
