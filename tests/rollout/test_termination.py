"""Every episode ends with a reason, and the reason says whose failure it was.

Real episodes (real tokenizer, real envs, real sandboxes; the scripted engine replies with
fixed texts because the subject is the env side): a sandbox that dies mid-episode and cannot
restart ends the episode as `sandbox_error` (infra), while code that kills its own sandbox is
an ordinary tool result (the policy's); a grader whose sandbox cannot start gives no fake 0;
engine failures are infra; the rollout's own crash is `agent_crash`; invalid tool calls in a
row end the episode at `rollout.max_invalid_tool_calls`.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest
from simple_engine import ScriptedEngine

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.base import GenerateResult
from agentrl.envs import make
from agentrl.envs.core import Task, ToolEnv
from agentrl.rollout import RolloutRunner
from agentrl.tools.core import ToolSet, tool
from agentrl.types import (
    TERMINATION_KIND,
    InfraError,
    Message,
    Trajectory,
    is_infra_failure,
)


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _run(chat: ChatFormat, engine: Any, make_env: Any, n: int = 1, **cfg: Any) -> list[Trajectory]:
    rollout = RolloutConfig(**{"max_turns": 6, "max_total_tokens": 8192, **cfg})
    runner = RolloutRunner(engine, chat, make_env, rollout, SamplingConfig(max_new_tokens=1024))
    try:
        trajs = [t for g in runner.collect_sync([0], n=n) for t in g.trajectories]
    finally:
        runner.close()
    for t in trajs:
        t.validate()
    return trajs


def test_every_reason_is_classified_once() -> None:
    """The table covers every `TerminationReason`; unknown strings (older files) train."""
    from typing import get_args

    from agentrl.types import TerminationReason

    assert set(get_args(TerminationReason)) == set(TERMINATION_KIND)
    infra = {r for r in TERMINATION_KIND if is_infra_failure(r)}
    assert infra == {
        "timeout",
        "env_error",
        "engine_error",
        "sandbox_error",
        "tool_error",
        "agent_crash",
    }
    assert not is_infra_failure("stopped_early")
    with pytest.raises(ValueError, match="infra termination"):
        InfraError("max_turns", "a policy outcome is no infra error")
    back = pickle.loads(pickle.dumps(InfraError("sandbox_error", "node lost")))
    assert back.reason == "sandbox_error" and str(back) == "node lost"


# ---------------------------------------------------------------- sandboxes


class PythonEnv(ToolEnv):
    """A task answered after using the real sandboxed `python` tool; 'ok' scores 1."""

    made: list[PythonEnv] = []

    def __init__(self) -> None:
        from agentrl.tools.python import PythonTools

        super().__init__(PythonTools(timeout_s=5.0), max_turns=6)
        PythonEnv.made.append(self)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        return Task([Message("user", "Compute 6*7 with python, then say ok.")])

    def score(self, final: Message) -> float:
        return 1.0 if "ok" in final.content else 0.0


class HostFailsAtTurn(ScriptedEngine):
    """Before generating turn `at`, the host running sandbox backend `backend` breaks: its
    idle sandboxes die (as the OOM killer or a node drain would kill them) and bubblewrap is
    gone, so no new one can start. What the model sees and does is unchanged: the failure is
    the host's."""

    def __init__(self, chat: ChatFormat, replies: list[str], at: int, backend: str) -> None:
        super().__init__(chat, replies)
        self.at, self.backend = at, backend

    async def generate(self, prompt_ids: Any, params: Any, **kw: Any) -> GenerateResult:
        if self.turns.get(kw.get("session_id"), 0) == self.at:
            from agentrl.sandboxes.base import get_backend

            host: Any = get_backend(self.backend)  # the instance every grade on it uses
            host.bwrap = "/nonexistent/bwrap"
            host.pool.close()  # kills the idle sandboxes; later runs must start new ones
        return await super().generate(prompt_ids, params, **kw)


def _register_local(name: str) -> str:
    """A fresh real local sandbox backend under `name` (shared per process by name)."""
    from agentrl.sandboxes.base import register_backend
    from agentrl.sandboxes.local import LocalBackend

    register_backend(name, LocalBackend)
    return name


def test_a_sandbox_that_dies_mid_episode_ends_it_as_infra(chat: ChatFormat) -> None:
    """code/functions with the `run_tests` tool: the first run works on the real sandbox, the
    host breaks, the second run ends the episode as `sandbox_error` (no fake result)."""
    backend = _register_local("test-host-dies")

    def env() -> Any:
        return make("code/functions-v0", multi_turn=True, backend=backend)

    probe = env()
    probe.reset(seed=0)
    solution = probe.problem.solution
    run_tests = _call("run_tests", code=solution)
    final = f"```python\n{solution}```"
    engine = HostFailsAtTurn(chat, [run_tests, run_tests, final], at=1, backend=backend)
    (traj,) = _run(chat, engine, env)
    assert traj.turns[0].tool_calls and not traj.turns[0].tool_calls[0].parse_error, traj.turns
    first = traj.turns[0].tool_results[0]
    assert not first.is_error and "example tests passed" in first.content
    assert first.content.startswith("2/2 example tests passed"), first.content
    assert traj.termination == "sandbox_error" and traj.infra_failed
    assert "grading sandbox" in traj.metadata["error"]
    assert len(traj.turns) == 2 and traj.reward == 0.0


def test_code_that_kills_its_own_sandbox_is_the_policys_outcome(chat: ChatFormat) -> None:
    """The adversary has full Python inside the sandbox: killing every process it can reach
    is a tool result like any other (the session restarts), never an infra exclusion."""
    kill_all = "import os, signal\nfor pid in range(1, 200):\n    try: os.kill(pid, 9)\n    except Exception: pass"
    replies = [_call("python", code=kill_all), _call("python", code="print(1 + 1)"), "ok"]
    (traj,) = _run(chat, ScriptedEngine(chat, replies), PythonEnv)
    assert traj.termination == "done" and not traj.infra_failed and traj.reward == 1.0
    assert traj.turns[1].tool_results[0].content.strip().startswith("2")


def _register_broken_backend() -> str:
    """A real local sandbox backend on a host whose bubblewrap is gone: every run reports
    `sandbox_error` ("sandbox failed twice to start"), as a broken node would."""
    from agentrl.sandboxes.base import get_backend

    name = _register_local("test-no-bwrap")
    host: Any = get_backend(name)
    host.bwrap = "/nonexistent/bwrap"
    return name


def test_a_grader_whose_sandbox_fails_gives_no_fake_zero(chat: ChatFormat) -> None:
    backend = _register_broken_backend()

    def env() -> Any:
        return make("code/functions-v0", backend=backend)

    probe = env()
    probe.reset(seed=0)
    oracle = probe.oracle_action()
    assert oracle is not None
    good = make("code/functions-v0")  # the same submission scores 1 on a working sandbox
    good.reset(seed=0)
    assert good.step(oracle)[1] == 1.0
    (traj,) = _run(chat, ScriptedEngine(chat, [oracle.content]), env)
    assert traj.termination == "sandbox_error" and traj.infra_failed
    assert "grading sandbox" in traj.metadata["error"]


# ---------------------------------------------------------------- engine, tools, rollout


class CalcEnv(ToolEnv):
    """`add` and a tool whose backing service is down; 'ok' scores 1."""

    def __init__(self) -> None:
        super().__init__(ToolSet.of(add, lookup), max_turns=8)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        return Task([Message("user", "Add 2 and 3, then say ok.")])

    def score(self, final: Message) -> float:
        return 1.0 if "ok" in final.content else 0.0


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    if a < 0:
        raise ValueError("negative numbers are not supported")  # the model's bad argument
    return a + b


@tool
def lookup(key: str) -> str:
    """Look a key up in the (unreachable) store.

    Args:
        key: the key
    """
    raise InfraError("tool_error", "store at 10.0.0.7:6379 refused the connection")


def test_engine_failures_mid_episode_are_infra(chat: ChatFormat) -> None:
    class FailsOnTurnTwo(ScriptedEngine):
        async def generate(self, prompt_ids: Any, params: Any, **kw: Any) -> GenerateResult:
            k = self.turns.get(kw.get("session_id"), 0)
            if k == 1 and kw.get("session_id", "").endswith("/0"):
                self.turns[kw.get("session_id")] = k + 1
                return GenerateResult([], [], "abort", "request aborted: engine restarting")
            if k == 1:
                raise RuntimeError("CUDA error: an illegal memory access")
            return await super().generate(prompt_ids, params, **kw)

    engine = FailsOnTurnTwo(chat, [_call("add", a=2, b=3), "ok"])
    trajs = _run(chat, engine, CalcEnv, n=2)
    assert [t.termination for t in trajs] == ["engine_error", "engine_error"]
    assert all(t.infra_failed and len(t.turns) == 1 for t in trajs)
    assert "aborted" in trajs[0].metadata["error"] and "CUDA" in trajs[1].metadata["error"]


def test_a_tool_raising_on_bad_arguments_is_the_policys_a_dead_service_is_infra(
    chat: ChatFormat,
) -> None:
    replies = [_call("add", a=-1, b=3), _call("add", a=2, b=3), "ok"]
    (traj,) = _run(chat, ScriptedEngine(chat, replies), CalcEnv)
    bad = traj.turns[0].tool_results[0]
    assert bad.is_error and not bad.invalid and "negative" in bad.content
    assert traj.termination == "done" and traj.reward == 1.0

    (traj,) = _run(chat, ScriptedEngine(chat, [_call("lookup", key="x"), "ok"]), CalcEnv)
    assert traj.termination == "tool_error" and traj.infra_failed
    assert "refused the connection" in traj.metadata["error"]


def test_a_crash_of_the_rollouts_own_code_is_agent_crash(chat: ChatFormat) -> None:
    class ParserBug(ChatFormat):
        """A chat format whose parser has a bug on the second turn."""

        calls = 0

        def parse(self, text: str, tools: Any) -> Any:
            ParserBug.calls += 1
            if ParserBug.calls == 2:
                raise IndexError("list index out of range")
            return super().parse(text, tools)

    buggy = ParserBug(chat.tokenizer)
    engine = ScriptedEngine(buggy, [_call("add", a=2, b=3), "ok"])
    (traj,) = _run(buggy, engine, CalcEnv)
    assert traj.termination == "agent_crash" and traj.infra_failed
    assert "IndexError" in traj.metadata["error"]
    assert len(traj.turns) == 1  # the second turn's tokens, never recorded as a turn, are cut


# ---------------------------------------------------------------- invalid tool calls

UNKNOWN = _call("subtract", a=1, b=2)
OFF_SCHEMA = _call("add", a="two", b=3)
UNPARSABLE = '<tool_call>{"name": "add", "arguments": {a: 1}</tool_call>'
VALID = _call("add", a=2, b=3)


def test_invalid_calls_in_a_row_end_the_episode_with_their_own_reason(chat: ChatFormat) -> None:
    replies = [UNKNOWN, OFF_SCHEMA, UNPARSABLE, "ok"]
    (traj,) = _run(chat, ScriptedEngine(chat, replies), CalcEnv, max_invalid_tool_calls=3)
    assert traj.termination == "invalid_tool_calls" and not traj.infra_failed
    assert len(traj.turns) == 3 and traj.reward == 0.0
    assert [r.invalid for u in traj.turns[:2] for r in u.tool_results] == [True, True]
    assert traj.turns[2].tool_calls[0].parse_error
    assert traj.metadata["error"] == "3 invalid tool calls in a row"


def test_a_valid_call_resets_the_count_and_no_limit_by_default(chat: ChatFormat) -> None:
    replies = [UNKNOWN, OFF_SCHEMA, VALID, UNKNOWN, UNPARSABLE, "ok"]
    (traj,) = _run(chat, ScriptedEngine(chat, replies), CalcEnv, max_invalid_tool_calls=3)
    assert traj.termination == "done" and traj.reward == 1.0 and len(traj.turns) == 6

    looping = [UNKNOWN] * 10
    (traj,) = _run(chat, ScriptedEngine(chat, looping), CalcEnv, max_turns=5)
    assert traj.termination == "max_turns" and len(traj.turns) == 5  # off: the turn limit


def test_several_invalid_calls_in_one_turn_count_one_by_one(chat: ChatFormat) -> None:
    replies = [UNKNOWN + "\n" + OFF_SCHEMA, "ok"]
    (traj,) = _run(chat, ScriptedEngine(chat, replies), CalcEnv, max_invalid_tool_calls=2)
    assert traj.termination == "invalid_tool_calls" and len(traj.turns) == 1


def test_spans_time_the_episode_phases(chat: ChatFormat) -> None:
    (traj,) = _run(chat, ScriptedEngine(chat, [VALID, "ok"]), CalcEnv)
    spans = traj.metadata["spans"]
    assert set(spans) == {"generate", "queued", "env", "tools", "reward"}
    assert all(v >= 0.0 for v in spans.values())
    assert spans["queued"] == 0.0  # an engine without the "admission" feature: never queued
    assert spans["tools"] == pytest.approx(traj.turns[0].tool_results[0].wall_s, abs=1e-3)
    assert spans["reward"] <= spans["env"] <= traj.metadata["wall_s"]
