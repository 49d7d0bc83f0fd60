"""mini-swe-agent (examples/harness/mini_swe.py), unchanged, on agentrl's SWE env and its grader.

Real parts: mini-swe-agent 2.4 (its `DefaultAgent`, litellm, its shipped configs) in a child
process, the gateway over the hf engine on the tiny random model, `swe/tiny-repo-v0` with its
sandboxed workspace (the agent's bash runs there, through the env's `bash` tool at
`task["tools_url"]`) and its grader (hidden tests on the edited files). A random model fixes
nothing, so every finished episode scores 0; what is checked is that the program runs end to
end, is recorded token-exactly, is graded, and that a crash is not a zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("minisweagent", reason="the harness venv: bash scripts/setup-harness.sh")
pytest.importorskip("llguidance", reason="tool_choice needs the serve extra")

from gateway_episode import assert_token_exact, run_episode  # noqa: E402

from agentrl.cli import main  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def test_one_episode_runs_bash_in_the_env_and_is_graded(agentrl_cache: Path) -> None:
    """Tool-call mode, each turn a forced bash call: the commands run in the env's workspace
    (their output comes back as mini-swe-agent's observation), the step limit ends the run,
    the SWE grader scores the untouched bug 0, and each turn is recorded token-exactly."""
    ep, calls = run_episode(agentrl_cache, "swe/tiny-repo-v0", "tiny_agents:mini_bash")
    assert ep.failure is None, ep.record.metadata.get("error")
    assert ep.record.metadata["answer"] == "LimitsExceeded"  # step_limit=2
    assert ep.record.reward == 0.0
    assert_token_exact(ep.segments, calls)
    assert len(calls) == 2
    ran = ep.record.metadata["env_tool_calls"]
    assert ran >= 1  # a call cut by max_tokens is a format error, the other ran
    sent = [m for seg in ep.segments for m in seg.messages]
    assert {c.name for m in sent for c in m.tool_calls} == {"bash"}
    observations = [m.content for m in sent if m.role == "tool"]
    assert observations and all('"returncode": ' in o for o in observations)


def train(cache: Path, out: Path, agent: str, **extra: Any) -> list[dict[str, Any]]:
    sets = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": cache,
        "data.batch_size": 2,
        "rollout.n": 2,
        "rollout.concurrency": 4,
        "trainer.tensorboard": "false",
        "trainer.steps": 1,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 2,
        "trainer.out_dir": out,
        "sft.steps": 0,
        "data.eval_episodes": 0,
        "rollout.harness.timeout_s": 400,
    } | {k.replace("__", "."): v for k, v in extra.items()}
    args = ["train", "--agent", agent, "--env", "swe/tiny-repo-v0"]
    assert main([*args, *(f"{k}={v}" for k, v in sets.items())]) == 0
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_agentrl_train_runs_mini_swe_agent(agentrl_cache: Path, tmp_path: Path) -> None:
    """`agentrl train --agent ... --env swe/tiny-repo-v0`, tool-call mode: every run finishes
    (no infra failure), its bash commands ran in the env, and the grader's 0 is trained."""
    out = tmp_path / "run"
    (row,) = train(agentrl_cache, out, "tiny_agents:mini_bash", trainer__dump_rollouts_every=1)
    assert row["harness/infra_failed"] == 0 and row["harness/episodes"] == 4
    assert row["reward/mean"] == 0.0
    assert row["loss"] == row["loss"]  # finite
    dumped = (out / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    ran = {
        t["metadata"]["episode"]: t["metadata"]["env_tool_calls"] for t in map(json.loads, dumped)
    }
    assert len(ran) == 4 and all(n >= 1 for n in ran.values())


def test_split_sessions_and_crashes(agentrl_cache: Path, tmp_path: Path) -> None:
    """Text mode: the random model's turns never parse; mini-swe-agent drops each from its
    history, so every episode is split into segments (one per turn, three format errors end
    it), trained as one episode with the grader's 0. Odd seeds crash mini-swe-agent itself:
    counted as infra failures and left out, not trained as zeros."""
    (row,) = train(agentrl_cache, tmp_path / "run", "tiny_agents:mini_text_flaky")
    assert row["harness/failed/agent_crash"] == 2 and row["harness/infra_failed"] == 2
    assert row["harness/groups_dropped"] == 1
    assert row["harness/episodes"] == 2
    assert row["harness/split_episodes"] == 2
    assert row["harness/segments"] == 6 and row["harness/segments_per_episode"] == 3
    assert row["reward/mean"] == 0.0
    assert row["loss"] == row["loss"]  # finite
