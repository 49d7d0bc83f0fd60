"""Tools for chat templates that have no tool support: hermes-style injection into messages.

Why: many real instruct checkpoints (SmolLM2, older Llama/Mistral fine-tunes) ship a plain
ChatML-like template that ignores `tools`, drops assistant `tool_calls` and renders a `tool`
message, if at all, as an unknown role. RL on tool use still works if the conversation itself
carries the tool protocol, so when `ChatFormat` finds that a template ignores `tools` it
rewrites the messages before rendering, exactly as Qwen2.5's hermes template would render them:

* the tool schemas go into the system message (a new one if the conversation has none), with
  the `<tool_call>{"name": ..., "arguments": ...}</tool_call>` instructions;
* an assistant message's `tool_calls` become `<tool_call>` blocks in its content;
* `tool` results become a user turn of `<tool_response>` blocks (consecutive ones merged).

The matching parser is `hermes`. Rendering stays a pure function of the messages, so the
rollout's fixed-base observation deltas and the re-rendered history agree token for token.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.chat import bounded_json

HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
_PROBE_NAME = "probe_tool_zq"
_PROBE = {
    "type": "function",
    "function": {
        "name": _PROBE_NAME,
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def template_renders_tools(render: Any) -> bool:
    """Whether `render(messages, tools)` (a text renderer) shows tool schemas at all; a
    template that raises on `tools` counts as not rendering them."""
    try:
        return _PROBE_NAME in render([{"role": "user", "content": "hi"}], [_PROBE])
    except Exception:  # noqa: BLE001 - any template error means: no native tool support
        return False


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The system-prompt text listing `tools` (OpenAI function schemas), hermes style."""
    lines = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return HEADER + lines + FOOTER


def call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        args = bounded_json.loads(args) if args.strip() else {}
    body = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def inject_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict]:
    """`messages` (chat-template dicts) rewritten to carry `tools` and tool traffic as text."""
    out: list[dict[str, Any]] = []
    block = tools_block(tools)
    if messages and messages[0].get("role") == "system":
        system = messages[0].get("content") or ""
        out.append({"role": "system", "content": f"{system}\n\n{block}" if system else block})
        rest = messages[1:]
    else:
        out.append({"role": "system", "content": block})
        rest = messages
    for m in rest:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            parts = [m.get("content") or ""] if m.get("content") else []
            parts += [call_text(c) for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            response = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("_tool_turn"):
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "_tool_turn": True})
        else:
            out.append({k: v for k, v in m.items() if k != "tool_calls"})
    for m in out:
        m.pop("_tool_turn", None)
    return out
