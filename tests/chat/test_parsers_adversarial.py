"""Parsers under adversarial model output: nothing escapes, nesting is bounded, work is linear.

`run_episode` promises never to raise on model output; a tool call nested ~1,100 levels deep
used to raise `RecursionError` out of every JSON-based parser and end the whole batch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parsers_xml_mistral import QWEN35_RESPONSE_TEMPLATE

from agentrl.chat import bounded_json
from agentrl.chat.parsers import FORMATS, parse
from agentrl.types import ToolCall

DEEP = 1100  # past CPython's recursion limit: what crashed the batch


def _nested(depth: int, opener: str = '{"a": ', leaf: str = "1", closer: str = "}") -> str:
    return opener * depth + leaf + closer * depth


DEEP_ARGS = _nested(DEEP)
DEEP_CALL = '{"name": "f", "arguments": ' + DEEP_ARGS + "}"
DEEP_TEXTS = {
    "hermes": f"<tool_call>{DEEP_CALL}</tool_call>",
    "llama3": DEEP_CALL,
    "json": DEEP_CALL,
    "mistral": f"[TOOL_CALLS][{DEEP_CALL}]",
    "qwen3_coder": (
        "<tool_call>\n<function=f>\n<parameter=a>\n"
        + _nested(DEEP, "[", "", "]")
        + "\n</parameter>\n</function>\n</tool_call>"
    ),
    "response_template": "<tool_call>\n<function=f>\n<parameter=a>\n"
    + _nested(DEEP, "[", "", "]")
    + "\n</parameter>\n</function>\n</tool_call>",
}


def _check(out: Any) -> tuple[str, list[ToolCall]]:
    content, calls = out
    assert isinstance(content, str)
    assert all(isinstance(c, ToolCall) for c in calls)
    for c in calls:  # what every later step does with a call must work too
        json.dumps(c.arguments, default=str)
    return content, calls


@pytest.mark.parametrize("fmt", sorted(DEEP_TEXTS))
def test_deeply_nested_call_is_a_parse_error_of_that_call(fmt: str) -> None:
    template = QWEN35_RESPONSE_TEMPLATE if fmt == "response_template" else None
    fallback = "qwen3_coder" if fmt == "response_template" else "hermes"
    content, calls = _check(
        parse(
            "ok " + DEEP_TEXTS[fmt] if fmt == "hermes" else DEEP_TEXTS[fmt],
            fmt,
            response_template=template,
            fallback=fallback,
        )
    )
    if fmt in ("qwen3_coder", "response_template"):  # XML values are text: too deep stays text
        assert len(calls) == 1 and calls[0].name == "f"
        value = calls[0].arguments["a"]
        assert isinstance(value, str) and value.startswith("[[[")
        return
    assert len(calls) == 1, calls
    assert "nested deeper than" in (calls[0].parse_error or ""), calls[0]


def test_deep_arguments_string_is_a_parse_error() -> None:
    body = json.dumps({"name": "f", "arguments": DEEP_ARGS})  # arguments as a JSON string
    _, calls = _check(parse(f"<tool_call>{body}</tool_call>", "hermes"))
    assert calls[0].name == "f" and "nested deeper than" in (calls[0].parse_error or "")


def test_nesting_within_the_bound_still_parses() -> None:
    depth = bounded_json.MAX_DEPTH - 2
    call = '{"name": "f", "arguments": ' + _nested(depth) + "}"
    _, calls = _check(parse(f"<tool_call>{call}</tool_call>", "hermes"))
    assert calls[0].parse_error is None and calls[0].name == "f"


@pytest.mark.parametrize("value", ["3e552288", "-1e999", "Infinity", "NaN"])
def test_a_number_json_cannot_hold_is_a_parse_error(value: str) -> None:
    """`float` rounds 3e552288 to inf, which would go back to a client as `Infinity` (invalid
    JSON: Codex CLI refused the call); such a call is a parse error, as any non-JSON is."""
    call = '{"name": "f", "arguments": {"n": ' + value + "}}"
    _, calls = _check(parse(f"<tool_call>{call}</tool_call>", "hermes"))
    assert len(calls) == 1 and "JSON" in (calls[0].parse_error or ""), calls
    assert bounded_json.loads('{"n": 1e308}') == {"n": 1e308}  # large but finite still parses


def test_a_broken_tool_schema_is_a_parse_error_not_an_exception() -> None:
    bad_tools: list[Any] = [{"function": {"name": "f", "parameters": {"properties": {"a": 3}}}}]
    bad_tools.append("not a schema")  # a parser that trips over it must not raise
    text = "<tool_call>\n<function=f>\n<parameter=a>\n[1]\n</parameter>\n</function>\n</tool_call>"
    _check(parse(text, "qwen3_coder", bad_tools))
    with pytest.raises(ValueError, match="unknown tool format"):  # a config error still raises
        parse("x", "nope")


# Pieces every parser keys on, so random texts reach deep into each one.
PIECES = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "[TOOL_CALLS]", "[ARGS]",
    "[CALL_ID]", "<|python_tag|>", "<function=f>", "</function>", "<parameter=a>",
    "</parameter>", "{", "}", "[", "]", '"', "\\", ":", ",", ";", "\n", " ", '"name"',
    '"arguments"', '"parameters"', '"f"', "1", "1e999", "9" * 5000, "null", "true", "\ud800",
    '{"name": "f", "arguments": {"a": 1}}', "{" * 150, "[" * 150, "}" * 150, "]" * 150,
]  # fmt: skip
SCHEMAS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "anyOf", "oneOf", "enum", "properties", "name", "function"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)
TOOLS = st.none() | st.lists(
    st.builds(
        lambda props: {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": props}},
        },
        st.dictionaries(st.sampled_from(["a", "b"]), SCHEMAS, max_size=2),
    )
    | SCHEMAS,
    max_size=2,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=40).map("".join),
    fmt=st.sampled_from(FORMATS),
    tools=TOOLS,
)
def test_no_exception_escapes_any_parser(text: str, fmt: str, tools: Any) -> None:
    template = QWEN35_RESPONSE_TEMPLATE if fmt == "response_template" else None
    for fallback in ("hermes", "qwen3_coder") if template else ("hermes",):
        _check(parse(text, fmt, tools, template, fallback))


ADVERSARIAL = {
    "open braces": "{" * 200_000,
    "unclosed objects": '{"a":' * 40_000,
    "quote brace": '{"' * 100_000,
    "brackets": "[" * 200_000,
    "escapes": '"\\' * 100_000,
    "calls opened": '{"name":"f","arguments":{' * 8_000,
    "tool_call blocks": "<tool_call>{" * 16_000,
    "mistral lists": "[TOOL_CALLS]" + "[" * 200_000,
    "mistral v11": "[TOOL_CALLS]f[ARGS]" + '{"a":' * 40_000,
    "keys without values": '{"a"' * 50_000,
}


@pytest.mark.timeout(120)  # each text is 200 KB: quadratic work would take hours
@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_sizes_stay_linear(name: str) -> None:
    text = ADVERSARIAL[name]
    for fmt in FORMATS:
        _, calls = _check(parse(text, fmt))
        assert len(calls) <= len(text)
