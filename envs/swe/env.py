"""`swe/*`: fix an injected bug in a real repository over many turns; reward = hidden tests.

* Observation: an issue-style statement (file, function, how many tests fail) and the tools.
* Tools (``SweTools``): ``bash`` (a command in the workspace; cwd and files persist, processes
  do not), ``view`` (a file with line numbers and an optional range, or a directory listing),
  ``str_replace`` (exact, unique match; errors say how many matches and where), ``run_tests``
  (the *visible* tests only: the suite with the hidden tests removed) and ``submit``. Every
  output is capped and says what was cut.
* Reward: ``grade.py``: hidden tests on the agent's source changes, tests restored from the
  pristine copy, the rest of the suite required to stay green, source changes outside the repair language (``edits.py``) score 0.
* Termination: ``submit`` or a message without tool calls submits; ``max_turns`` truncates (0).
* Oracle: the reverse mutation through ``str_replace``, then ``submit`` (scores 1).
  Adversaries (``check_env`` runs them, each must score 0): submit at once; delete the tests;
  a ``conftest.py`` that passes everything; an early ``os._exit(0)`` in the source.
* Sources: ``swe/pyrepo-v0``: bugs in real PyPI sdists (inflection, cachetools, toolz), the set
  shipped in ``data/tasks.jsonl`` or one built with ``scripts/build-swe-tasks.py``
  (``tasks=path``); ``swe/tiny-repo-v0``: the same on ``minilib`` (``tiny.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import posixpath
from functools import cached_property
from typing import Any

import numpy as np

from agentrl.sandboxes.workspace import ROOT, Workspace
from agentrl.tools import ToolSet, tool
from agentrl.types import Message, ToolCall

from ..core import Observation, Task, ToolEnv
from ..hidden_data import HiddenData, distinctive
from . import grade as grading
from .tasks import SweTask, load_tasks, pristine

_OUT = 6000
_PASS_ALL = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


class SweTools(ToolSet):
    """The agent's hands in one workspace. Bound to the env's current task and workspace."""

    def __init__(self, backend: str, timeout_s: float) -> None:
        super().__init__()
        self.backend, self.timeout_s = backend, timeout_s
        self.ws: Workspace | None = None
        self.task: SweTask | None = None
        self.submitted = False

    def reset(self) -> None:
        self.submitted = False

    @property
    def _ws(self) -> Workspace:
        if self.ws is None:
            raise RuntimeError("no workspace: reset() the env first")
        return self.ws

    @tool(timeout_s=120.0, max_output_chars=_OUT + 400)
    async def bash(self, command: str) -> str:
        """Run a bash command in the repository (working directory and file changes persist).

        Args:
            command: The command line, e.g. `grep -n "def camelize" -r .`.
        """
        res = await self._ws.arun(command, self.timeout_s)
        return res.render()

    @tool(timeout_s=10.0, max_output_chars=_OUT + 400)
    def view(self, path: str, start_line: int = 1, end_line: int = 0) -> str:
        """Show a file with line numbers (or list a directory).

        Args:
            path: File or directory, relative to the current directory or absolute under /work/repo.
            start_line: First line to show (1-based).
            end_line: Last line to show; 0 means to the end.
        """
        ws = self._ws
        rel = ws.resolve(path)
        if not ws.exists(rel):
            names = sorted({p for p in ws.files() if rel in (".", "") or p.startswith(rel + "/")})
            if not names:
                return f"Error: {path} does not exist"
            shown = "\n".join(names[:200])
            more = f"\n[... {len(names) - 200} more]" if len(names) > 200 else ""
            return shown + more
        lines = ws.read(rel).decode("utf-8", "replace").splitlines()
        lo, hi = max(1, start_line), (end_line if end_line > 0 else len(lines))
        if lo > len(lines):
            return f"Error: {path} has {len(lines)} lines; start_line={start_line} is past the end"
        body = "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(lo, min(hi, len(lines)) + 1))
        if len(body) > _OUT:
            body = body[:_OUT] + f"\n[... cut at {_OUT} chars: view a smaller line range]"
        return body

    @tool(timeout_s=10.0)
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one exact occurrence of old_str in a file with new_str.

        Args:
            path: The file to edit.
            old_str: Text to replace; must occur exactly once (include surrounding lines to make it unique).
            new_str: The replacement text.
        """
        ws = self._ws
        rel = ws.resolve(path)
        if not ws.exists(rel):
            return f"Error: {path} does not exist"
        text = ws.read(rel).decode("utf-8", "surrogateescape")  # other bytes round-trip
        count = text.count(old_str) if old_str else 0
        if count != 1:
            if not old_str:
                return "Error: old_str is empty"
            if count == 0:
                return f"Error: old_str was not found in {path} (it must match exactly, whitespace included)"
            lines = [str(n) for n in _first_lines(text, old_str, 10)]
            return f"Error: old_str occurs {count} times in {path} (lines {', '.join(lines)}); make it unique"
        ws.write(rel, text.replace(old_str, new_str).encode("utf-8", "surrogateescape"))
        line = text[: text.index(old_str)].count("\n") + 1
        return f"Edited {path} at line {line}."

    @tool(timeout_s=300.0, max_output_chars=_OUT + 400)
    async def run_tests(self) -> str:
        """Run the repository's visible tests and report failures."""
        ws, task = self._ws, self.task
        assert task is not None
        outcomes = await asyncio.to_thread(
            grading.run_tests_in_sandbox, task, ws.files(), self.backend, self.timeout_s * 4
        )
        if outcomes is None:
            return "The test run did not finish (timeout or crash)."
        failed = sorted(t for t, v in outcomes.items() if v == "failed")
        passed = sum(v == "passed" for v in outcomes.values())
        lines = [f"{passed} passed, {len(failed)} failed."]
        lines += [f"FAILED {t}" for t in failed[:30]]
        if len(failed) > 30:
            lines.append(f"[... {len(failed) - 30} more failures]")
        return "\n".join(lines)

    @tool(timeout_s=5.0)
    def submit(self) -> str:
        """Submit the current state of the repository for grading; ends the episode."""
        self.submitted = True
        return "Submitted."


class SweEnv(ToolEnv, HiddenData):
    family = "swe"
    description = (
        "Fix an injected bug in a real repo (bash/view/str_replace/run_tests); hidden tests"
    )
    max_turns = 30
    max_observation_chars = 64_000

    def __init__(
        self,
        tasks: str | None = None,
        package: str | None = None,
        reward_mode: str = "fraction",
        backend: str = "local",
        timeout_s: float = 30.0,
        max_turns: int | None = None,
    ) -> None:
        if reward_mode not in ("fraction", "all"):
            raise ValueError(f"reward_mode must be 'fraction' or 'all', got {reward_mode!r}")
        super().__init__(SweTools(backend, timeout_s), max_turns)
        self.tasks_path, self.package, self.reward_mode = tasks, package, reward_mode
        self.backend, self.timeout_s = backend, timeout_s
        if not self.dataset:
            raise ValueError(
                f"no SWE tasks for package={package!r} in {tasks or 'the shipped set'}"
            )
        self._trees: dict[str, dict[str, bytes]] = {}
        self.last_grade: grading.Grade | None = None

    @cached_property
    def dataset(self) -> list[SweTask]:
        tasks = load_tasks(self.tasks_path)
        if self.package:
            return [t for t in tasks if t.package == self.package]
        return [t for t in tasks if t.spec.archive]  # the real packages, not minilib

    @property
    def swe(self) -> SweTools:
        assert isinstance(self.tools, SweTools)
        return self.tools

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        index = options.get("index", int(rng.integers(len(self.dataset))))
        task = self.dataset[index % len(self.dataset)]
        if task.id not in self._trees:
            self._trees[task.id] = grading.workspace_tree(task)
        self.swe.task = task
        self.swe.ws = Workspace(self._trees[task.id], self.backend, self.timeout_s)
        self.last_grade = None
        msgs = [Message("user", task.statement())]
        return Task(msgs, answer=task, info={"task_id": task.id, "package": task.package})

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if action.tool_calls:
            obs, reward, term, trunc, info = await super().astep(action)
            if not self.swe.submitted:
                return obs, reward, term, trunc, info
        else:
            self.turn += 1
            obs, info = Observation([]), {}
        g = await asyncio.to_thread(self._grade)
        return obs, g.reward, True, False, {**info, **self._grade_info(g)}

    def _finish(self, final: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        g = self._grade()
        return Observation([]), g.reward, True, False, self._grade_info(g)

    def score(self, final: Message) -> float:
        return self._grade().reward

    def _grade(self) -> grading.Grade:
        task = self.swe.task
        assert task is not None, "reset() first"
        self.last_grade = grading.grade(task, self.swe._ws.files(), self.backend, self.reward_mode)
        return self.last_grade

    @staticmethod
    def _grade_info(g: grading.Grade) -> dict[str, Any]:
        info: dict[str, Any] = {"grade": g.summary(), "hidden_passed": g.hidden_passed}
        info.update(hidden_total=g.hidden_total, discarded=g.discarded, tamper=g.tamper)
        return info

    def hidden_data(self) -> list[str]:
        """The hidden tests' lines (what the workspace lost) and the pristine buggy line."""
        task = self.swe.task
        assert task is not None, "reset() first"
        full, shown = grading.mutated_tree(task), self._trees[task.id]
        hidden = []
        for path, data in full.items():
            if shown.get(path) != data:
                kept = set(shown.get(path, b"").decode("utf-8", "replace").splitlines())
                text = data.decode("utf-8", "replace").splitlines()
                hidden.append("\n".join(ln for ln in text if ln not in kept))
        m, src = task.mutation, pristine(task.package)[task.mutation.file].decode("utf-8")
        hidden.append(src[src.rfind("\n", 0, m.start) + 1 : src.find("\n", m.end)])
        visible = [d.decode("utf-8", "replace") for d in shown.values()]
        return distinctive(hidden, [*visible, self.task.messages[0].content if self.task else ""])

    def oracle_action(self) -> Message | None:
        task = self.swe.task
        if task is None:
            return None
        if self.turn == 0:
            old, new = _oracle_edit(task, self._trees[task.id][task.mutation.file].decode())
            args = {"path": task.mutation.file, "old_str": old, "new_str": new}
            return Message("assistant", "", tool_calls=[ToolCall("str_replace", args, id="call_0")])
        return Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="call_1")])

    def adversaries(self) -> dict[str, list[Message]]:
        """Scripts that must score ``reward_range[0]`` (``check_env`` plays them)."""
        task = self.swe.task
        assert task is not None
        src = posixpath.join(ROOT, task.mutation.file)
        first = _first_line(self._trees[task.id][task.mutation.file].decode())
        tests = " ".join(task.spec.tests)
        scripts = {
            "no-op": [],
            "delete-tests": [_bash(f"rm -rf {tests}")],
            "conftest-pass-all": [_bash(f"cat > conftest.py <<'EOF'\n{_PASS_ALL}EOF")],
            "early-exit": [
                _call(
                    "str_replace",
                    path=src,
                    old_str=first,
                    new_str="import os; os._exit(0)\n" + first,
                )
            ],
        }
        submit = Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="call_s")])
        return {name: [*steps, submit] for name, steps in scripts.items()}


def _oracle_edit(task: SweTask, mutated: str) -> tuple[str, str]:
    """old/new strings around the bug, widened line by line until old is unique."""
    m = task.mutation
    fixed = m.revert(mutated)
    lo = mutated.rfind("\n", 0, m.start) + 1
    hi_m = mutated.find("\n", m.start + len(m.after))
    for _ in range(50):
        old = mutated[lo : hi_m if hi_m >= 0 else len(mutated)]
        if mutated.count(old) == 1:
            break
        lo = mutated.rfind("\n", 0, max(lo - 1, 0)) + 1
        nxt = mutated.find("\n", hi_m + 1) if hi_m >= 0 else -1
        hi_m = nxt
    end_fixed = len(fixed) - (len(mutated) - (hi_m if hi_m >= 0 else len(mutated)))
    return old, fixed[lo:end_fixed]


def _first_line(text: str) -> str:
    return text.splitlines(keepends=True)[0] if text else ""


def _find_all(text: str, sub: str):
    i = text.find(sub)
    while i >= 0:
        yield i
        i = text.find(sub, i + 1)


def _first_lines(text: str, sub: str, limit: int) -> list[int]:
    """Line numbers of the first `limit` matches, counted on from the last one (linear: the
    error path used to count from the start for every match, 200k matches ran for minutes)."""
    out: list[int] = []
    line, at = 1, 0
    for i in itertools.islice(_find_all(text, sub), limit):
        line += text.count("\n", at, i)
        out.append(line)
        at = i
    return out


def _call(name: str, **args: Any) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, args, id=f"call_{name}")])


def _bash(command: str) -> Message:
    return _call("bash", command=command)
