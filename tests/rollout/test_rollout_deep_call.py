"""A tool call nested past the recursion limit is that call's parse error, not a batch crash.

Before the nesting bound, 1,100 levels raised `RecursionError` out of the parser and ended
the whole rollout batch, though `run_episode` promises never to raise on model output.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from simple_engine import ScriptedEngine

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.envs.core import Task, ToolEnv
from agentrl.rollout import RolloutRunner
from agentrl.tools.core import ToolSet, tool
from agentrl.types import Message

DEEP = '<tool_call>{"name": "echo", "arguments": ' + '{"a": ' * 1100 + "1" + "}" * 1101
DEEP += "</tool_call>"


@tool
def echo(a: Any) -> str:
    """Echoes its argument."""
    return json.dumps(a)[:100]


class EchoEnv(ToolEnv):
    def __init__(self) -> None:
        super().__init__(ToolSet.of(echo), max_turns=4)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        return Task([Message("user", "Call echo.")])

    def score(self, final: Message) -> float:
        return 1.0 if "ok" in final.content else 0.0


def test_deep_call_is_recorded_as_a_parse_error_and_the_batch_finishes(chat: ChatFormat) -> None:
    rollout = RolloutConfig(max_turns=4, max_total_tokens=200_000, episode_timeout_s=60.0)
    runner = RolloutRunner(
        ScriptedEngine(chat, [DEEP, "ok"]),
        chat,
        EchoEnv,
        rollout,
        SamplingConfig(max_new_tokens=100_000),
    )
    groups = runner.collect_sync([0, 1], n=2)
    trajs = [t for g in groups for t in g.trajectories]
    assert len(trajs) == 4
    for traj in trajs:
        traj.validate()
        json.loads(traj.to_json())
        first = traj.turns[0]
        assert "nested deeper than" in (first.tool_calls[0].parse_error or "")
        assert first.tool_results[0].is_error
        assert traj.termination == "done" and traj.reward == 1.0
