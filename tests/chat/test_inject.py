"""Hermes-style tool injection for templates that ignore `tools` (SmolLM2's ChatML): the
schemas reach the system message, calls and results render as text the hermes parser reads
back, and the rollout's fixed-base deltas reproduce the re-rendered conversation exactly."""

from __future__ import annotations

import json

from agentrl.chat import ChatFormat
from agentrl.chat.inject import inject_tools, tools_block
from agentrl.types import Message, ToolCall

NO_TOOLS = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


def _episode() -> list[Message]:
    call = ToolCall("calculator", {"expression": "24 * 56"}, id="c0")
    return [
        Message("system", "Be brief."),
        Message("user", "What is 24 * 56?"),
        Message("assistant", "", tool_calls=[call]),
        Message("tool", "1344", tool_call_id="c0", name="calculator"),
        Message("assistant", "The answer is 1344."),
    ]


def test_messages_carry_tools_calls_and_results_as_text() -> None:
    msgs = inject_tools([m.to_chat() for m in _episode()], [TOOL])
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Be brief.\n\n# Tools")
    assert json.dumps(TOOL) in msgs[0]["content"]
    assert msgs[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "24 * 56"}}'
        "\n</tool_call>",
    }
    assert msgs[3] == {"role": "user", "content": "<tool_response>\n1344\n</tool_response>"}
    two = [Message("tool", "a").to_chat(), Message("tool", "b").to_chat()]
    merged = inject_tools(two, [TOOL])[1]["content"]
    assert merged == "<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response>"
    assert inject_tools([{"role": "user", "content": "hi"}], [TOOL])[0]["content"] == tools_block(
        [TOOL]
    )


def test_chat_format_injects_only_for_templates_without_tools(tokenizers: dict) -> None:
    tok = tokenizers["tiny"]
    plain = ChatFormat(tok, chat_template=NO_TOOLS)
    assert plain.inject and plain.tool_format == "hermes"
    native = ChatFormat(tok)  # the tiny template renders tools itself
    assert not native.inject
    assert "calculator" in plain.render([Message("user", "q")], [TOOL])
    assert "calculator" not in plain.render([Message("user", "q")], None)


def test_rollout_deltas_reproduce_the_injected_render(tokenizers: dict) -> None:
    chat = ChatFormat(tokenizers["tiny"], chat_template=NO_TOOLS)
    msgs = _episode()
    ids = chat.prompt_ids(msgs[:2], [TOOL])
    first = chat.assistant_ids(msgs[2], [TOOL])
    first = first[: first.index(chat.end_of_turn_id) + 1]
    _, calls = chat.parse(chat.sampled_text(first))
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "24 * 56"})]
    ids += first + chat.observation_ids(msgs[3:4], [TOOL], sampled_ids=first)
    last = chat.assistant_ids(msgs[4], [TOOL])
    ids += last[: last.index(chat.end_of_turn_id) + 1]
    rendered = chat.encode(chat.render(msgs, [TOOL]))
    assert rendered[: len(ids)] == ids and len(rendered) - len(ids) <= 1  # the trailing "\n"
