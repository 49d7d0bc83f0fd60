"""ChatFormat on the real Qwen2.5, Qwen3 and Llama-3.1 templates and the tiny one: prompt
ids match the tokenizer's own rendering; prompt + sampled + observation deltas reproduce the
template's rendering of the whole conversation, whether the model stopped or ran out."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.chat import ChatFormat
from agentrl.types import Message, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
NAMES = ["tiny", "qwen2_5", "qwen3", "llama3_1"]


def history() -> list[Message]:
    return [Message("system", "Be brief."), Message("user", "What is 6 * 7?")]


def assistant(k: int, think: bool) -> Message:
    pre = "<think>\nI should compute.\n</think>\n\n" if think else ""
    call = ToolCall("calculator", {"expression": f"6 * {k}"}, id=f"call_{k}")
    return Message("assistant", pre, tool_calls=[call])


def result(k: int) -> Message:
    return Message("tool", str(6 * k), tool_call_id=f"call_{k}", name="calculator")


@pytest.mark.parametrize("name", NAMES)
def test_prompt_ids_match_tokenizer(name: str, tokenizers: dict[str, Any]) -> None:
    tok = tokenizers[name]
    chat = ChatFormat(tok)
    msgs = [m.to_chat() for m in history()]
    want = tok.apply_chat_template(
        msgs, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert chat.prompt_ids(history(), TOOLS) == list(want)


@pytest.mark.parametrize("stopped", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_append_reproduces_template(name: str, stopped: bool, tokenizers: dict) -> None:
    chat = ChatFormat(tokenizers[name])
    think = name == "qwen3"  # Qwen3 keeps reasoning inside one tool loop only when present
    msgs = history()
    ids = chat.prompt_ids(msgs, TOOLS)
    for k in (1, 2):
        a = assistant(k, think)
        rendered = chat.assistant_ids(a, TOOLS)
        cut = rendered.index(chat.end_of_turn_id) + (1 if stopped else 0)
        sampled = rendered[:cut]  # what a model following the template samples
        ids = ids + sampled
        ids = ids + chat.observation_ids([result(k)], TOOLS, sampled_ids=sampled)
        msgs = [*msgs, a, result(k)]
    want = chat.encode(chat.render(msgs, TOOLS, add_generation_prompt=True))
    assert chat.decode(ids) == chat.decode(want)
    assert ids == want


@pytest.mark.parametrize("name", NAMES)
def test_observation_starts_after_end_of_turn(name: str, tokenizers: dict) -> None:
    chat = ChatFormat(tokenizers[name])
    eot = chat.end_of_turn_id
    full = chat.observation_ids([result(1)], TOOLS)
    assert full[0] == eot
    assert chat.observation_ids([result(1)], TOOLS, sampled_ids=[5, eot]) == full[1:]
    assert chat.observation_ids([result(1)], TOOLS, sampled_ids=[5, 6]) == full
    text = chat.decode(full)
    assert "42" not in text and "6" in text  # only the new message, never the history
    assert text.endswith(chat.decode(chat.prompt_ids([Message("user", "x")], None))[-6:])


def test_qwen3_think_stripping_keeps_sampled_tokens(tokenizers: dict) -> None:
    """Qwen3 drops earlier <think> on re-render; the appended sequence keeps what was sampled."""
    chat = ChatFormat(tokenizers["qwen3"])
    msgs = history()
    ids = chat.prompt_ids(msgs, TOOLS)
    a = Message("assistant", "<think>\nPLANQ\n</think>\n\nIt is 42.")
    sampled = chat.assistant_ids(a, TOOLS)[:-1]  # up to <|im_end|>
    follow_up = Message("user", "And 6 * 8?")
    ids += sampled + chat.observation_ids([follow_up], TOOLS, sampled_ids=sampled)
    rerender = chat.render([*msgs, a, follow_up], TOOLS, add_generation_prompt=True)
    assert "PLANQ" in chat.decode(ids) and "PLANQ" not in rerender
    assert chat.decode(ids).endswith("And 6 * 8?<|im_end|>\n<|im_start|>assistant\n")


def test_llama_uses_eot_and_ipython(tokenizers: dict) -> None:
    chat = ChatFormat(tokenizers["llama3_1"])
    assert chat.tool_format == "llama3"
    assert chat.tokenizer.convert_ids_to_tokens(chat.end_of_turn_id) == "<|eot_id|>"
    obs = chat.decode(chat.observation_ids([result(1)], TOOLS, sampled_ids=[chat.end_of_turn_id]))
    assert obs == (
        '<|start_header_id|>ipython<|end_header_id|>\n\n"6"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    content, calls = chat.parse('{"name": "calculator", "parameters": {"expression": "1"}}')
    assert content == "" and calls[0].arguments == {"expression": "1"}


def test_template_kwargs_reach_the_template(tokenizers: dict) -> None:
    chat = ChatFormat(tokenizers["qwen3"], template_kwargs={"enable_thinking": False})
    assert chat.render(history(), add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_no_template_is_an_error(tokenizers: dict) -> None:
    with pytest.raises(ValueError, match="no chat template"):
        ChatFormat(tokenizers["tiny"], chat_template="")


def test_known_stop_tokens_stop_only_where_special() -> None:
    """`</s>` as an ordinary added token (Gemma's id 212, HTML's strikethrough close) is text a
    turn may write: it stops nothing; added as a special token it stops the turn."""
    from transformers import AutoTokenizer

    from agentrl.models.tiny import build_tiny

    path = build_tiny("qwen2")
    plain, special = AutoTokenizer.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    before = ChatFormat(plain).stop_token_ids
    plain.add_tokens(["</s>"], special_tokens=False)
    assert ChatFormat(plain).stop_token_ids == before
    special.add_tokens(["</s>"], special_tokens=True)
    stop = special.convert_tokens_to_ids("</s>")
    assert ChatFormat(special).stop_token_ids == sorted({*before, stop})
