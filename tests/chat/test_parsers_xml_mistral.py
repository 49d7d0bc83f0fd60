"""Qwen3-Coder XML and Mistral `[TOOL_CALLS]` parsers, chosen from the chat template, and
transformers' `parse_response` where the tokenizer declares a `response_template`.

The two templates in tests/data/chat_templates/*_format.jinja are stand-ins written for these
tests in the published formats (tool calls and tool results as those templates render them);
round trips render an assistant tool call with the template and parse it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.chat.parsers import detect_format, parse
from agentrl.types import Message, ToolCall

TEMPLATES = Path(__file__).parents[1] / "data" / "chat_templates"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "k": {"type": "integer"},
                    "exact": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": "string", "nullable": True},
                },
            },
        },
    }
]

XML = """I will search.
<tool_call>
<function=search>
<parameter=query>
42 is
the answer
</parameter>
<parameter=k>
3
</parameter>
<parameter=exact>
True
</parameter>
<parameter=tags>
["a", "b"]
</parameter>
</function>
</tool_call>
<tool_call>
<function=search>
<parameter=query>
007
</parameter>
</function>
</tool_call>"""


def test_qwen3_coder_xml_with_schema_casts_to_declared_types() -> None:
    content, calls = parse(XML, "qwen3_coder", TOOLS)
    assert content == "I will search."
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [
        ("search", {"query": "42 is\nthe answer", "k": 3, "exact": True, "tags": ["a", "b"]}, None),
        ("search", {"query": "007"}, None),
    ]


def test_qwen3_coder_xml_without_schema_decodes_json_values() -> None:
    _, calls = parse(XML, "qwen3_coder")
    assert calls[0].arguments["k"] == 3 and calls[0].arguments["tags"] == ["a", "b"]
    assert calls[0].arguments["query"] == "42 is\nthe answer" and calls[1].arguments == {
        "query": "007"
    }


@pytest.mark.parametrize(
    "text, error",
    [
        ("<tool_call>\n<function=search>\n<parameter=query>\nx\n</parameter>\n", "unterminated"),
        (
            "<tool_call>\n<function=search>\n<parameter=query>\nx\n</function></tool_call>",
            "not closed",
        ),
        ("<tool_call>\nsearch(query=1)\n</tool_call>", "no <function=NAME>"),
        ("<tool_call><function=>\n</function></tool_call>", "empty function name"),
    ],
)
def test_qwen3_coder_malformed_calls_are_error_calls(text: str, error: str) -> None:
    content, calls = parse("before " + text, "qwen3_coder", TOOLS)
    assert content == "before" and len(calls) == 1 and error in (calls[0].parse_error or "")


def test_qwen3_coder_accepts_hermes_json_inside_tool_call() -> None:
    _, calls = parse(
        '<tool_call>\n{"name": "search", "arguments": {"k": 1}}\n</tool_call>', "qwen3_coder"
    )
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [("search", {"k": 1}, None)]


def test_qwen3_coder_round_trip_through_its_template(tokenizers: dict) -> None:
    tok = tokenizers["tiny"]
    tpl = (TEMPLATES / "qwen3_coder_format.jinja").read_text()
    assert detect_format(tpl) == "qwen3_coder"
    call = ToolCall("search", {"query": "a <b> & c", "k": 5, "tags": ["x"]}, id="c1")
    msgs = [Message("user", "hi"), Message("assistant", "", tool_calls=[call])]
    chat = [m.to_chat() for m in msgs]
    head = tok.apply_chat_template(chat[:1], tools=TOOLS, chat_template=tpl, tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    full = tok.apply_chat_template(chat, tools=TOOLS, chat_template=tpl, tokenize=False)
    sampled = full[len(head) :].removesuffix("<|im_end|>\n")
    content, calls = parse(sampled, "qwen3_coder", TOOLS)
    assert content == "" and [(c.name, c.arguments) for c in calls] == [(call.name, call.arguments)]


def test_mistral_v3_json_list_and_empty_list() -> None:
    text = '[TOOL_CALLS] [{"name": "search", "arguments": {"query": "x"}, "id": "abcDEF123"}, {"name": "search", "arguments": {"k": 2}}]'
    content, calls = parse(text, "mistral")
    assert content == ""
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [
        ("search", {"query": "x"}, None),
        ("search", {"k": 2}, None),
    ]
    assert calls[0].id == "abcDEF123"
    assert len(calls[1].id) == 9 and calls[1].id.isalnum()
    assert parse("Nothing to call.[TOOL_CALLS][]", "mistral") == ("Nothing to call.", [])


def test_mistral_v11_name_args_form_and_errors() -> None:
    text = 'Sure.[TOOL_CALLS]search[ARGS]{"query": "x"}[TOOL_CALLS]search[CALL_ID]q1w2e3r4t[ARGS]{"k": 1}'
    content, calls = parse(text, "mistral")
    assert content == "Sure."
    assert [(c.name, c.arguments, c.id) for c in calls][1] == ("search", {"k": 1}, "q1w2e3r4t")
    assert calls[0].arguments == {"query": "x"} and len(calls[0].id) == 9
    _, bad = parse('[TOOL_CALLS]search[ARGS]{"query": ', "mistral")
    assert len(bad) == 1 and "invalid JSON" in (bad[0].parse_error or "")
    _, bad = parse("[TOOL_CALLS]just words", "mistral")
    assert len(bad) == 1 and bad[0].parse_error
    _, bad = parse("[TOOL_CALLS] [{oops", "mistral")
    assert len(bad) == 1 and "invalid JSON" in (bad[0].parse_error or "")


def test_mistral_round_trip_and_ids_the_template_accepts(tokenizers: dict) -> None:
    tok = tokenizers["tiny"]
    tpl = (TEMPLATES / "mistral_format.jinja").read_text()
    assert detect_format(tpl) == "mistral"
    sampled = 'Let me look.[TOOL_CALLS]search[ARGS]{"query": "x", "k": 2}'
    content, calls = parse(sampled, "mistral")
    msgs = [
        Message("user", "hi"),
        Message("assistant", content, tool_calls=calls),
        Message("tool", "found", tool_call_id=calls[0].id, name="search"),
    ]
    text = tok.apply_chat_template([m.to_chat() for m in msgs], chat_template=tpl, tokenize=False)
    assert '[TOOL_CALLS]search[ARGS]{"query": "x", "k": 2}' in text
    bad = [Message("user", "hi"), Message("assistant", "", tool_calls=[ToolCall("s", {}, id="c1")])]
    with pytest.raises(Exception, match="length 9"):  # why the parser assigns such ids
        tok.apply_chat_template([m.to_chat() for m in bad], chat_template=tpl, tokenize=False)


# transformers ships this response_template for Qwen3.5 (transformers/cli/serving/utils.py):
# the Qwen3-Coder XML inside <tool_call>, reasoning in <think>. A tokenizer whose config carries
# one gets `response_template` parsing under `auto`.
QWEN35_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>",
            "close_pattern": r"</function>\s*</tool_call>",
            "repeats": True,
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r"<parameter=(?P<key>[^>\n]+)>\s*(?P<value>.*?)\s*</parameter>"
            },
            "transform": {
                "type": "function",
                "function": {"name": "{name}", "arguments": "{content}"},
            },
        },
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", "content": "text"},
    },
}


def test_response_template_is_used_under_auto(tokenizers: dict) -> None:
    from transformers import AutoTokenizer

    from agentrl.chat import ChatFormat

    tok = AutoTokenizer.from_pretrained(tokenizers["tiny"].name_or_path)
    tok.chat_template = (TEMPLATES / "qwen3_coder_format.jinja").read_text()
    tok.response_template = QWEN35_RESPONSE_TEMPLATE
    chat = ChatFormat(tok)
    assert chat.tool_format == "response_template"
    content, calls = chat.parse(XML.replace("True", "true"), TOOLS)
    assert content == "I will search."
    assert [(c.name, c.arguments) for c in calls] == [
        ("search", {"query": "42 is\nthe answer", "k": 3, "exact": True, "tags": ["a", "b"]}),
        ("search", {"query": "007"}),
    ]
    # what the response_template cannot parse falls back to the template's own format
    tok.response_template = {**QWEN35_RESPONSE_TEMPLATE, "fields": {"content": {"content": "int"}}}
    content, calls = ChatFormat(tok).parse(XML, TOOLS)
    assert content == "I will search." and len(calls) == 2
    tok.response_template = None
    assert ChatFormat(tok).tool_format == "qwen3_coder"
