import time

from agentrl.tools import ToolSet, build_schema, tool
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
