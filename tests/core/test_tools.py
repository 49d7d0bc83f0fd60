import enum
import time
from typing import Literal, Optional

import pytest
from transformers.utils import get_json_schema

from agentrl.tools import ToolSet, build_schema, tool, workers
from agentrl.tools.calculator import calculator
from agentrl.types import ToolCall


@tool(timeout_s=0.2)
def slow(seconds: float) -> str:
    """Sleep a while.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "woke"


@tool
def boom(x: int, label: str = "a") -> str:
    """Always raises."""
    raise RuntimeError(f"kaboom {x}")


@tool(max_output_chars=100)
def flood() -> str:
    """Returns 10 MB."""
    return "x" * 10_000_000


def test_schema_from_hints_and_docstring():
    s = build_schema(calculator)["function"]
    assert s["name"] == "calculator"
    assert s["description"] == "Evaluate an arithmetic expression exactly."
    assert s["parameters"]["properties"]["expression"]["type"] == "string"
    assert "e.g." in s["parameters"]["properties"]["expression"]["description"]
    assert s["parameters"]["required"] == ["expression"]
    b = build_schema(boom)["function"]["parameters"]
    assert b["required"] == ["x"] and b["properties"]["label"]["default"] == "a"


def test_errors_become_results_and_episode_continues():
    ts = ToolSet.of(calculator, slow, boom, flood)
    ok = ts.call(ToolCall("calculator", {"expression": "2*(3+4)"}, id="1"))
    assert (ok.content, ok.is_error) == ("14", False)
    bad_args = ts.call(ToolCall("calculator", {"expr": "1"}, id="2"))
    assert bad_args.is_error and "invalid arguments" in bad_args.content
    wrong_type = ts.call(ToolCall("boom", {"x": "notint"}, id="3"))
    assert wrong_type.is_error and "x" in wrong_type.content
    raised = ts.call(ToolCall("boom", {"x": 1}, id="4"))
    assert raised.is_error and "kaboom 1" in raised.content
    hung = ts.call(ToolCall("slow", {"seconds": 5}, id="5"))
    assert hung.is_error and "timed out" in hung.content and hung.wall_s < 4
    big = ts.call(ToolCall("flood", {}, id="6"))
    assert big.truncated and len(big.content) < 200
    unknown = ts.call(ToolCall("nope", {}, id="7"))
    assert unknown.is_error and "unknown tool" in unknown.content
    unparsable = ts.call(ToolCall("calculator", {}, id="8", parse_error="bad JSON"))
    assert unparsable.is_error and "bad JSON" in unparsable.content


def test_calculator_is_not_eval():
    ts = ToolSet.of(calculator)
    r = ts.call(ToolCall("calculator", {"expression": "__import__('os').system('echo hi')"}))
    assert r.is_error and "unsupported" in r.content
    assert ts.call(ToolCall("calculator", {"expression": "9**999999"})).is_error
    assert ts.call(ToolCall("calculator", {"expression": "7/2"})).content == "3.5"


def test_toolset_schemas_are_cached_per_function_but_independent() -> None:
    """Every episode builds its ToolSet: schemas come from a per-function cache, yet each
    ToolSet gets its own copy, and a method's first parameter is left out whatever its name."""

    class Adder(ToolSet):
        @tool
        def add(this, a: int, b: int) -> int:  # noqa: N805 - the name must not matter
            """Add two numbers.

            Args:
                a: first
                b: second
            """
            return a + b

    first, second = Adder().schemas, Adder().schemas
    assert first == second
    assert list(first[0]["function"]["parameters"]["properties"]) == ["a", "b"]
    first[0]["function"]["name"] = "changed"
    assert Adder().schemas[0]["function"]["name"] == "add"


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@tool
def paint(color: Color, tags: Optional[list[str]] = None, size: Literal[1, 2] = 1) -> str:
    """Paint something.

    Args:
        color: the colour to use.
        tags: labels to attach, or null for none.
        size: brush size.
    """
    assert isinstance(color, Color)
    return f"{color.name} {tags} {size}"


@tool
def drink(beverage: str, sugar: int | None = None) -> str:
    """Order a drink.

    Args:
        beverage (str): what to drink (choices: ["tea", "coffee"])
    """
    return beverage


def test_schema_is_transformers_get_json_schema_plus_agentrl_keys() -> None:
    """The schema is what `transformers.utils.get_json_schema` builds (so chat templates render
    it as they do HF tools), plus defaults and `additionalProperties: false`."""
    ours = build_schema(paint)["function"]
    theirs = get_json_schema(paint)["function"]
    assert ours["description"] == theirs["description"] == "Paint something."
    for name, prop in theirs["parameters"]["properties"].items():
        assert {
            k: v for k, v in ours["parameters"]["properties"][name].items() if k != "default"
        } == prop
    assert ours["parameters"]["properties"]["color"]["enum"] == ["red", "green"]
    assert ours["parameters"]["properties"]["tags"]["nullable"] is True
    assert ours["parameters"]["additionalProperties"] is False
    d = build_schema(drink)["function"]["parameters"]["properties"]
    assert (
        d["beverage"]["enum"] == ["tea", "coffee"]
        and d["beverage"]["description"] == "what to drink"
    )
    assert "description" not in d["sugar"] and d["sugar"]["nullable"] is True


def test_enum_optional_and_choices_validate_and_convert() -> None:
    ts = ToolSet.of(paint, drink)
    ok = ts.call(ToolCall("paint", {"color": "green", "tags": None}, id="1"))
    assert (ok.content, ok.is_error) == ("GREEN None 1", False)
    assert ts.call(ToolCall("paint", {"color": "red", "tags": ["a"], "size": 2})).content == (
        "RED ['a'] 2"
    )
    bad = ts.call(ToolCall("paint", {"color": "blue"}))
    assert bad.is_error and "color" in bad.content and "'blue'" in bad.content
    assert ts.call(ToolCall("paint", {"color": "red", "tags": [1]})).is_error
    assert ts.call(ToolCall("paint", {"color": "red", "size": 3})).is_error
    assert ts.call(ToolCall("drink", {"beverage": "tea", "sugar": None})).content == "tea"
    assert ts.call(ToolCall("drink", {"beverage": "beer"})).is_error


def test_unsupported_hint_names_the_tool() -> None:
    class Custom:
        pass

    def weird(x: Custom) -> str:
        """Bad.

        Args:
            x: a thing.
        """
        return ""

    with pytest.raises(TypeError, match="weird"):
        build_schema(weird)


def test_sync_tools_reuse_workers_and_never_queue_behind_a_hung_one():
    """Sync tools run on kept daemon workers (no thread start per call, which waited for the
    interpreter lock on the event loop); a worker stuck in a hung call is never waited for."""
    import threading

    ts = ToolSet.of(calculator, slow)
    tools = lambda: [t for t in threading.enumerate() if t.name == "agentrl-tool"]  # noqa: E731
    ts.call(ToolCall("calculator", {"expression": "1+1"}))
    before = len(tools())
    for i in range(20):
        assert ts.call(ToolCall("calculator", {"expression": f"{i}+1"})).content == str(i + 1)
    assert len(tools()) == before  # the idle worker took every call
    hung = [ts.call(ToolCall("slow", {"seconds": 3})) for _ in range(2)]  # 2 workers stuck
    assert all(h.is_error and "timed out" in h.content for h in hung)
    t = time.perf_counter()
    ok = ts.call(ToolCall("calculator", {"expression": "6*7"}))
    assert ok.content == "42" and time.perf_counter() - t < 1.0  # a fresh worker, no queue
    assert all(t.daemon for t in tools())


def test_a_forked_child_starts_its_own_tool_workers():
    """The parent's idle workers do not exist in a forked child: its first call must start
    one, not wait for a thread that was never copied."""
    import multiprocessing

    ts = ToolSet.of(calculator)
    ts.call(ToolCall("calculator", {"expression": "1+1"}))
    deadline = time.monotonic() + 10
    while workers._WORKERS._idle == 0 and time.monotonic() < deadline:  # the worker is back
        time.sleep(0.01)
    assert workers._WORKERS._idle > 0  # the parent now has an idle worker

    def child(q: "multiprocessing.Queue[str]") -> None:
        q.put(ts.call(ToolCall("calculator", {"expression": "2+3"})).content)

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    try:
        assert q.get(timeout=20) == "5"
    finally:
        p.join(timeout=20)


def test_a_worker_that_cannot_start_leaves_no_call_queued(monkeypatch):
    """Out of threads: the call fails with the error, and nothing is left in the queue for a
    later worker to pick up unpromised (which would miscount idle workers)."""
    import threading

    monkeypatch.setattr(workers, "_WORKERS", workers._DaemonWorkers())  # no idle worker yet
    start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        if self.name == "agentrl-tool":
            raise RuntimeError("can't start new thread")
        start(self)

    ts = ToolSet.of(calculator)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    failed = ts.call(ToolCall("calculator", {"expression": "1+1"}))
    assert failed.is_error and "can't start new thread" in failed.content
    monkeypatch.setattr(threading.Thread, "start", start)
    assert workers._WORKERS._idle == 0 and workers._WORKERS._jobs.empty()
    assert ts.call(ToolCall("calculator", {"expression": "2+3"})).content == "5"


def test_daemon_workers_keep_context_variables_and_deliver_stop_iteration() -> None:
    """As `asyncio.to_thread` does, a sync tool or env hook sees the caller's context
    variables (tracing spans, logging context); a `StopIteration` it raises reaches the
    caller as a RuntimeError instead of leaving the await hanging (a future cannot hold it)."""
    import asyncio
    import contextvars

    span: contextvars.ContextVar[str] = contextvars.ContextVar("span", default="none")

    def stop() -> None:
        raise StopIteration

    async def main() -> str:
        span.set("episode-7")
        with pytest.raises(RuntimeError, match="stop raised StopIteration"):
            await asyncio.wait_for(workers.in_daemon_thread(stop), 10)
        return await asyncio.wait_for(workers.in_daemon_thread(span.get), 10)

    assert asyncio.run(main()) == "episode-7"
