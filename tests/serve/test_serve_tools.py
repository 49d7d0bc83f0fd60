"""The Messages and Responses fronts turn their tool definitions into chat tools through one
helper (`agentrl.serve.messages.chat_tools`): the same definition, in either format, gives
the chat-completions tool the template renders; a hosted or server tool, in either, is a 400
naming its index and type. The token-exact path behind it is tests/serve/test_serve_gateway.py.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

from agentrl.serve import anthropic, responses  # noqa: E402
from agentrl.serve.limits import HTTPError  # noqa: E402
from agentrl.tools.calculator import calculator  # noqa: E402
from agentrl.tools.core import build_schema  # noqa: E402

CHAT_TOOLS = [build_schema(calculator)]
FN = CHAT_TOOLS[0]["function"]
HI = [{"role": "user", "content": "hi"}]


def _anthropic(tools: Any) -> dict[str, Any]:
    return anthropic.to_chat({"messages": HI, "max_tokens": 8, "tools": tools})


def _responses(tools: Any) -> dict[str, Any]:
    return responses.to_chat({"input": "hi", "tools": tools}, responses.Kept())[0]


def test_one_definition_gives_the_same_chat_tool_in_both_formats() -> None:
    anth = {"name": FN["name"], "description": FN["description"], "input_schema": FN["parameters"]}
    assert _anthropic([anth])["tools"] == CHAT_TOOLS
    assert _anthropic([{**anth, "type": "custom"}])["tools"] == CHAT_TOOLS
    assert _responses([{"type": "function", **FN}])["tools"] == CHAT_TOOLS
    # each format's own fields: a schema-less client tool takes any object; `strict` carries
    bare = _anthropic([{"name": "ping"}])["tools"][0]["function"]
    assert bare == {"name": "ping", "parameters": {"type": "object"}}
    strict = _responses([{"type": "function", **FN, "strict": True}])["tools"][0]["function"]
    assert strict == {**FN, "strict": True}
    assert "tools" not in _anthropic([]) and "tools" not in _responses(None)


@pytest.mark.parametrize(
    ("front", "tools", "named"),
    [
        (_anthropic, [{"name": "a"}, {"type": "web_search_20250305", "name": "web"}],
         "tools[1]: only custom tools are served, got 'web_search_20250305'"),
        (_responses, [{"type": "web_search"}], "tools[0]: only function tools are served"),
        (_responses, [{"name": "untyped"}], "tools[0]: only function tools are served, got None"),
        (_anthropic, ["calculator"], "tools[0]: only custom tools are served, got 'calculator'"),
        (_anthropic, {"name": "a"}, "tools must be a list"),
        (_responses, "calculator", "tools must be a list"),
    ],
)  # fmt: skip
def test_a_tool_this_server_cannot_run_is_a_400_naming_it(
    front: Any, tools: Any, named: str
) -> None:
    with pytest.raises(HTTPError) as e:
        front(tools)
    assert e.value.status == 400 and named in str(e.value)
