"""The tool-call and JSON grammars themselves, per tool format, on the tiny tokenizer: what a
forced call may sample is exactly what the format's parser reads back as that call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrl.chat import ChatFormat
from agentrl.chat.parsers import parse
from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema

llguidance = pytest.importorskip("llguidance", reason="constrained decoding needs the serve extra")

from agentrl.serve.constrain import (  # noqa: E402
    GrammarConstraint,
    no_call_grammar,
    styled,
    tool_call_grammar,
)

TOOLS = [build_schema(calculator)]


def call_text(fmt: str, name: str = "calculator") -> str:
    key = "parameters" if fmt == "llama3" else "arguments"
    body = json.dumps({"name": name, key: {"expression": "1+2"}})
    return f"<tool_call>{body}</tool_call>" if fmt == "hermes" else body


def accepts(chat: ChatFormat, grammar: str, text: str) -> bool:
    c = GrammarConstraint(grammar, chat)
    for tok in chat.encode(text):
        if not c.matcher.consume_token(tok):
            return False
    return c.matcher.is_accepting()


@pytest.mark.parametrize("fmt", ["hermes", "json", "llama3"])
def test_forced_call_grammar_matches_the_parser(served_model: Any, fmt: str) -> None:
    _, base = served_model
    chat = ChatFormat(base.tokenizer, tool_format=fmt)
    grammar = tool_call_grammar(chat, TOOLS, parallel=True)
    text = call_text(fmt)
    assert accepts(chat, grammar, text)
    _, calls = parse(text, fmt)
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [
        ("calculator", {"expression": "1+2"}, None)
    ]
    sep = "; " if fmt == "llama3" else "\n"
    assert accepts(chat, grammar, text + sep + text)  # parallel calls
    assert not accepts(chat, tool_call_grammar(chat, TOOLS, parallel=False), text + sep + text)
    assert not accepts(chat, grammar, call_text(fmt, name="rm_rf"))  # only declared tools
    assert not accepts(chat, grammar, "Sure! " + text)  # the call is the whole turn


def test_fixed_text_is_never_split_into_a_partial_token(served_model: Any) -> None:
    """After `"expression":` the grammar fixes ` "` next. A lone ` ` would also be consistent
    with it, but then the string must open with whatever token starts with a quote (SmolLM2
    took `")` and wrote `)68 + ...`); only tokens holding the whole ` "` are offered."""
    _, base = served_model
    chat = ChatFormat(base.tokenizer, tool_format="hermes")
    c = GrammarConstraint(tool_call_grammar(chat, TOOLS, parallel=False), chat)
    for tok in chat.encode('<tool_call>\n{"name": "calculator", "arguments": {"expression":'):
        c.allowed()
        c.accept(tok)
    offered = [chat.tokenizer.decode([i]) for i in c.allowed().nonzero().flatten().tolist()]
    assert ' "' in offered
    assert all(t.startswith(' "') for t in offered), offered
    for tok in chat.encode(' "12 + 3"}}\n</tool_call>'):  # and the call still completes
        c.allowed()
        c.accept(tok)
    assert c.matcher.is_accepting()


def test_after_a_forced_call_only_the_turn_can_end(served_model: Any) -> None:
    _, chat = served_model
    c = GrammarConstraint(tool_call_grammar(chat, TOOLS, parallel=False), chat)
    for tok in chat.encode(call_text("hermes")):
        c.accept(tok)
    allowed = c.allowed().nonzero().flatten().tolist()
    assert allowed and set(allowed) <= set(chat.stop_token_ids)


def test_no_call_grammar_bans_the_marker_even_spelled_out(served_model: Any) -> None:
    _, chat = served_model
    grammar = no_call_grammar(chat)
    assert grammar is not None
    assert accepts(chat, grammar, "The answer is 72.")
    assert not accepts(chat, grammar, call_text("hermes"))
    spelled = [chat.tokenizer.convert_tokens_to_ids(ch) for ch in "<tool_call>"]
    assert len(set(spelled)) > 1 and None not in spelled  # byte by byte, not the special token
    c = GrammarConstraint(grammar, chat)
    ok = [c.matcher.consume_token(t) for t in spelled]
    assert all(ok[:-1]) and not ok[-1]  # "<tool_call" is text; the closing ">" is refused


def test_unsupported_format_and_schema_styles(served_model: Any) -> None:
    from agentrl.serve.request import RequestError

    _, base = served_model
    with pytest.raises(RequestError, match="tool format 'none'"):
        tool_call_grammar(ChatFormat(base.tokenizer, tool_format="none"), TOOLS, True)
    assert styled({"type": "object"})["x-guidance"]["whitespace_flexible"] is False
    own = {"type": "object", "x-guidance": {"whitespace_flexible": True}}
    assert styled(own) is own
