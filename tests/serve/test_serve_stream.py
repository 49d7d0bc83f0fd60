"""`ChoiceStream` unit tests on the tiny tokenizer: token-by-token content deltas add up to
the parsed message's content, tool calls and reasoning are held back, never half-sent."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.serve.stream import ChoiceStream
from agentrl.types import Message

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>'


@pytest.mark.parametrize(
    ("text", "streamed"),
    [
        ("Hello world, the answer is 4.", "Hello world, the answer is 4."),
        ("<think>let me see</think>The answer is 4.", "The answer is 4."),
        (f"Sure. {CALL}", "Sure."),
        (CALL, ""),
        ("  spaced  out  ", "spaced  out"),
    ],
)
def test_deltas_add_up_to_the_parsed_content(served_model: Any, text: str, streamed: str) -> None:
    _, chat = served_model
    ids = chat.encode(text)
    st = ChoiceStream(chat, chat.tool_format)
    pieces = [st.delta(ids[:k]) for k in range(1, len(ids) + 1)]
    content, calls = chat.parse(chat.sampled_text(ids))
    rest, deltas = st.final(Message("assistant", content, tool_calls=calls))
    assert "".join(pieces) == streamed
    assert "".join(pieces) + rest == content
    assert "<tool_call" not in "".join(pieces)  # a call is never streamed as text
    assert [d["function"].get("name") for d in deltas if "id" in d] == [c.name for c in calls]


def test_unknown_tool_format_holds_everything_to_the_end(served_model: Any) -> None:
    _, chat = served_model
    ids = chat.encode("plain words")
    st = ChoiceStream(chat, "some_future_format")
    assert [st.delta(ids[:k]) for k in range(1, len(ids) + 1)] == [""] * len(ids)
    assert st.final(Message("assistant", "plain words"))[0] == "plain words"
