"""Tool-call parsers: every format, multiple calls, malformed input never raises."""

from __future__ import annotations

import pytest

from agentrl.chat.parsers import detect_format, parse, split_reasoning


def test_hermes_multiple_calls_and_content() -> None:
    text = (
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": [2]}"}</tool_call>'
    )
    content, calls = parse(text, "hermes")
    assert content == "Let me check."
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [
        ("a", {"x": 1}, None),
        ("b", {"y": [2]}, None),
    ]
    assert calls[0].raw == '{"name": "a", "arguments": {"x": 1}}'


@pytest.mark.parametrize(
    "body, error",
    [
        ('{"name": "a", "arguments": {x: 1}}', "invalid JSON"),
        ('{"arguments": {}}', 'no "name"'),
        ('["a"]', "not a JSON object"),
        ('{"name": "a", "arguments": [1]}', "must be a JSON object"),
        ('{"name": "a", "arguments": "{oops"}', "arguments string is not JSON"),
        ("", "invalid JSON"),
    ],
)
def test_hermes_malformed(body: str, error: str) -> None:
    content, calls = parse(f"hi <tool_call>{body}</tool_call>", "hermes")
    assert content == "hi" and len(calls) == 1
    assert error in (calls[0].parse_error or "")


def test_hermes_unterminated_block_is_an_error_call() -> None:
    _, calls = parse('<tool_call>{"name": "a", "argu', "hermes")
    assert calls[0].parse_error == "unterminated <tool_call> block"


def test_no_calls_is_plain_content() -> None:
    assert parse("  The answer is 4.  ", "hermes") == ("The answer is 4.", [])


def test_llama3_formats() -> None:
    _, calls = parse('{"name": "calc", "parameters": {"e": "1+1"}}', "llama3")
    assert [(c.name, c.arguments) for c in calls] == [("calc", {"e": "1+1"})]
    _, calls = parse(
        '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"k": 1}}',
        "llama3",
    )
    assert [(c.name, c.arguments) for c in calls] == [("a", {}), ("b", {"k": 1})]
    assert parse("The answer is {4}.", "llama3") == ("The answer is {4}.", [])
    assert parse('{"answer": 4}', "llama3") == ('{"answer": 4}', [])


def test_llama3_malformed() -> None:
    _, calls = parse('{"name": "a", "parameters": {"x": }', "llama3")
    assert calls[0].parse_error and "invalid JSON" in calls[0].parse_error
    _, calls = parse("<|python_tag|>calc(1)", "llama3")
    assert calls[0].parse_error


def test_json_fallback_and_none() -> None:
    text = 'I will call {"name": "calc", "arguments": {"e": "2"}} now {"other": 1}'
    content, calls = parse(text, "json")
    assert [c.name for c in calls] == ["calc"]
    assert content == 'I will call  now {"other": 1}'
    assert parse(text, "none") == (text, [])
    with pytest.raises(ValueError, match="unknown tool format"):
        parse(text, "xml")


def test_split_reasoning() -> None:
    assert split_reasoning("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_reasoning("plan</think>answer") == ("plan", "answer")
    assert split_reasoning("no think") == ("", "no think")


def test_detect_format(tokenizers: dict) -> None:
    got = {n: detect_format(t.chat_template) for n, t in tokenizers.items()}
    assert got == {"tiny": "hermes", "qwen2_5": "hermes", "qwen3": "hermes", "llama3_1": "llama3"}
    assert detect_format("{{ messages }}") == "json"
