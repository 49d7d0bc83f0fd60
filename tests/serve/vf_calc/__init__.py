"""A verifiers (0.4.0, `verifiers.v1`) taskset written with that package's own API, for the
serve test: arithmetic questions, rewarded when the final answer holds the right number.

Its harness is verifiers' own chat program (`NullHarness`), run with this interpreter: the
stock harness first builds a uv environment for the program from PyPI, which a test must not
need (everything the program imports is installed here already)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig

QUESTIONS = [("What is 12 + 30 * 2?", "72"), ("What is 5 * 5?", "25")]


class CalcData(vf.TaskData):
    answer: str


class CalcTask(vf.Task[CalcData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        from vf_calc.tools import CalcTools

        return [CalcTools(vf.ToolsetConfig())]

    @vf.reward
    async def correct(self, task: CalcData, trace: Any) -> float:
        replies = _assistant(trace)
        return float(bool(replies) and task.answer in str(replies[-1].content or ""))

    @vf.reward(weight=0.5)
    async def used_calculator(self, trace: Any) -> float:
        return float(any(c.name == "calculator" for m in _assistant(trace) for c in _calls(m)))


def _assistant(trace: Any) -> list[Any]:
    return [n.message for n in trace.nodes if n.message.role == "assistant"]


def _calls(message: Any) -> list[Any]:
    return list(getattr(message, "tool_calls", None) or [])


class CalcTaskset(vf.Taskset[CalcTask, vf.TasksetConfig]):
    def load(self) -> Iterator[CalcTask]:
        for i, (q, a) in enumerate(QUESTIONS):
            yield CalcTask(CalcData(name=f"calc#{i}", prompt=q, answer=a), self.config.task)


class _HereRuntime:
    """The runtime, except that a PEP 723 program runs on this interpreter (no uv)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: Any = None, **kw: Any) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f".vf-program-{abs(hash(data))}.py"
        await self._runtime.write(path, data)
        return [sys.executable, path]


class LocalChatHarness(NullHarness):
    async def setup(self, runtime: Any) -> None:
        pass

    async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kw: Any) -> Any:
        return await super().launch(ctx, trace, _HereRuntime(runtime), *args, **kw)


__all__ = ["CalcTaskset", "LocalChatHarness", "NullHarnessConfig"]
