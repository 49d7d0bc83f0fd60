"""Failures stay inside their episode: bad tools, hanging envs, failing engines, budgets."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
from simple_engine import ScriptedEngine

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.base import GenerateResult
from agentrl.envs.core import Task, ToolEnv
from agentrl.rollout import RolloutRunner
from agentrl.tools.core import ToolSet, tool
from agentrl.types import Message, Trajectory


@tool
def boom(x: int) -> str:
    """Always raises."""
    raise RuntimeError(f"kaboom {x}")


@tool(timeout_s=0.3)
def hang(x: int) -> str:
    """Sleeps far past its timeout."""
    time.sleep(5)
    return "late"


@tool(max_output_chars=2000)
def huge(x: int) -> str:
    """Returns 10 MB."""
    return "x" * 10_000_000


class TrapEnv(ToolEnv):
    """Ask a question; the final answer 'ok' scores 1. `fail` makes reset/step misbehave."""

    closed = 0

    def __init__(self, fail: str = "") -> None:
        super().__init__(ToolSet.of(boom, hang, huge), max_turns=8)
        self.fail = fail

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if self.fail == "reset":
            raise ValueError("bad task")
        return Task([Message("user", f"Task {options.get('q', 'none')}")])

    async def astep(self, action: Message) -> Any:
        if self.fail == "step":
            raise KeyError("env bug")
        if self.fail == "hang":
            await asyncio.sleep(60)
        return await super().astep(action)

    def score(self, final: Message) -> float:
        return 1.0 if "ok" in final.content else 0.0

    def close(self) -> None:
        TrapEnv.closed += 1


def call(name: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"x": 1}}) + "</tool_call>"


def run(chat: ChatFormat, replies: list[str], fail: str = "", **cfg: Any) -> list[Trajectory]:
    rollout = RolloutConfig(
        **{"max_turns": 6, "max_total_tokens": 4096, "episode_timeout_s": 2.0, **cfg}
    )
    engine = ScriptedEngine(chat, replies)
    runner = RolloutRunner(
        engine, chat, lambda: TrapEnv(fail), rollout, SamplingConfig(max_new_tokens=64)
    )
    groups = runner.collect_sync([0, 1], n=2)
    trajs = [t for g in groups for t in g.trajectories]
    for t in trajs:
        t.validate()
        json.loads(t.to_json())  # serializable, whatever happened
    return trajs


def test_bad_tools_are_recorded_and_batch_finishes(chat: ChatFormat) -> None:
    t0 = time.monotonic()
    trajs = run(chat, [call("boom"), call("hang"), call("huge"), call("nope"), "ok"])
    assert time.monotonic() - t0 < 5
    for traj in trajs:
        assert traj.termination == "done" and traj.reward == 1.0
        boom_r, hang_r, huge_r, unknown_r = (t.tool_results[0] for t in traj.turns[:4])
        assert boom_r.is_error and "kaboom 1" in boom_r.content
        assert hang_r.is_error and "timed out" in hang_r.content
        assert huge_r.truncated and not huge_r.is_error and len(huge_r.content) < 2100
        assert unknown_r.is_error and "unknown tool" in unknown_r.content
        assert len(traj.input_ids) < 4096


def test_malformed_call_gets_an_error_result(chat: ChatFormat) -> None:
    traj = run(chat, ['<tool_call>{"name": "boom", "arguments": {x: 1}</tool_call>', "ok"])[0]
    first = traj.turns[0]
    assert first.tool_calls[0].parse_error and first.tool_results[0].is_error
    assert traj.termination == "done"


def test_env_errors_end_only_their_episode(chat: ChatFormat) -> None:
    closed = TrapEnv.closed
    for fail, reason in [("reset", "env_error"), ("step", "env_error"), ("hang", "timeout")]:
        trajs = run(chat, [call("boom")], fail=fail, episode_timeout_s=0.5)
        assert [t.termination for t in trajs] == [reason] * 4
        assert all(t.metadata["error"] for t in trajs)
    assert TrapEnv.closed == closed + 12  # every env closed, whatever happened


def test_engine_errors_are_recorded(chat: ChatFormat) -> None:
    class Broken(ScriptedEngine):
        async def generate(self, prompt_ids: Any, params: Any, **kw: Any) -> GenerateResult:
            if kw.get("session_id", "").endswith("/1"):
                raise RuntimeError("CUDA fell over")
            return GenerateResult([], [], "error", "oom")

    runner = RolloutRunner(Broken(chat, ["x"]), chat, TrapEnv, RolloutConfig(), SamplingConfig())
    trajs = [t for g in runner.collect_sync([0], n=2) for t in g.trajectories]
    assert [t.termination for t in trajs] == ["engine_error", "engine_error"]
    assert "oom" in trajs[0].metadata["error"] and "CUDA" in trajs[1].metadata["error"]


def test_budgets(chat: ChatFormat) -> None:
    # per-turn budget hit without a stop -> overlong, exactly max_new_tokens sampled
    long_reply = "word " * 200
    traj = run(chat, [long_reply], max_turns=3)[0]
    assert traj.termination == "overlong" and sum(traj.loss_mask) == 64
    # total budget: observation tokens count; sampled never exceed what is left
    prompt = len(run(chat, ["ok"])[0].prompt_ids)
    for budget in (prompt + 5, prompt + 40, prompt + 120):
        traj = run(chat, [call("boom")] * 5, max_total_tokens=budget)[0]
        assert traj.termination == "max_tokens"
        assert len(traj.input_ids) <= budget
    # turn limit: last observation's messages kept, its tokens not appended
    traj = run(chat, [call("boom")], max_turns=2)[0]
    assert traj.termination == "max_turns" and len(traj.turns) == 2
    assert traj.turns[-1].obs_end == traj.turns[-1].end
    assert traj.messages[-1].role == "tool"


def test_turn_limit_is_the_envs_unless_the_config_sets_one(chat: ChatFormat) -> None:
    """`rollout.max_turns: null` (the default) plays to the env's own limit (TrapEnv: 8); a
    number overrides it. Hitting either limit is termination "max_turns"."""
    assert RolloutConfig().max_turns is None
    for max_turns, turns in [(None, 8), (12, 8), (3, 3)]:  # at 12 the env still stops at 8
        traj = run(chat, [call("boom")], max_turns=max_turns)[0]
        assert (traj.termination, len(traj.turns)) == ("max_turns", turns), max_turns
        assert traj.turns[-1].obs_end == traj.turns[-1].end  # nothing answers the last obs
        assert traj.messages[-1].role == "tool"


def test_observations_do_not_eat_turn_budget(chat: ChatFormat) -> None:
    """A huge tool result before a turn must not shrink that turn's max_new_tokens."""
    trajs = run(chat, [call("huge"), "word " * 200], max_turns=3)
    traj = trajs[0]
    assert traj.turns[0].obs_end - traj.turns[0].end > 64  # a long observation
    assert traj.termination == "overlong"
    assert traj.turns[1].end - traj.turns[1].start == 64


SLOW_SCORE_RUN = """
import sys, time
sys.path.insert(0, sys.argv[2])
from simple_engine import ScriptedEngine
from transformers import AutoTokenizer
from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.envs.core import Task, ToolEnv
from agentrl.rollout import RolloutRunner
from agentrl.types import Message

class SlowScore(ToolEnv):
    def new_task(self, rng, options):
        return Task([Message("user", "hi")])

    def score(self, final):
        time.sleep(60)  # a judge that hangs
        return 1.0

chat = ChatFormat(AutoTokenizer.from_pretrained(sys.argv[1]))
cfg = RolloutConfig(episode_timeout_s=0.5)
runner = RolloutRunner(ScriptedEngine(chat, ["done"]), chat, SlowScore, cfg, SamplingConfig())
(group,) = runner.collect_sync([0], n=1)
runner.close()
print(group.trajectories[0].termination, flush=True)
"""


def test_a_hung_score_does_not_keep_the_process_alive(tiny_path: Any) -> None:
    """A score() past the episode timeout ends its episode; its thread must not hold the
    process at exit for the minute the judge still sleeps."""
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).parent)
    cmd = [sys.executable, "-c", SLOW_SCORE_RUN, str(tiny_path), here]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "timeout"  # the run is over
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.communicate()
