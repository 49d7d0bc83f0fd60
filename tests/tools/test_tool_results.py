"""What the model reads for a tool's return value: a str as is, a dict/list as JSON (not
Python repr), and a forgotten `return` (None) as a plain note, never the string 'None'."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

from agentrl.tools import ToolSet, tool
from agentrl.tools.core import NO_RESULT
from agentrl.types import ToolCall


@tool()
def forgot(text: str) -> str:
    """Forgets to return.

    Args:
        text: x.
    """
    text[::-1]  # noqa: B018 - the bug under test: no return


@tool()
def as_dict(text: str) -> dict:
    """Returns a dict, one value JSON has no type for (sent as str).

    Args:
        text: x.
    """
    return {"reversed": text[::-1], "ok": True, "note": "ünï", "at": PurePosixPath("/x")}


@tool()
def as_list(text: str) -> list:
    """Returns a list.

    Args:
        text: x.
    """
    return [text, 3, ("t",)]


@tool()
def as_str(text: str) -> str:
    """Returns a str.

    Args:
        text: x.
    """
    return "{'not': 'json'}"


def _content(ts: ToolSet, name: str) -> str:
    r = ts.call(ToolCall(name, {"text": "abc"}))
    assert not r.is_error
    return r.content


def test_results_reach_the_model_as_json_text_or_a_note() -> None:
    ts = ToolSet.of(forgot, as_dict, as_list, as_str)
    assert _content(ts, "forgot") == NO_RESULT == "(the tool returned nothing)"
    text = _content(ts, "as_dict")
    assert json.loads(text) == {"reversed": "cba", "ok": True, "note": "ünï", "at": "/x"}
    assert "ünï" in text  # ensure_ascii=False: the model reads the characters
    assert json.loads(_content(ts, "as_list")) == ["abc", 3, ["t"]]
    assert _content(ts, "as_str") == "{'not': 'json'}"  # a str is never re-encoded
