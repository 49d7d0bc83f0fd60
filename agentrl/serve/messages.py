"""OpenAI chat-completions wire format <-> agentrl `Message`s."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from agentrl.types import Message, ToolCall


def _text(content: Any) -> str:
    """OpenAI content: a string, null, or a list of parts (text parts are joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if raw else {}
    except (TypeError, json.JSONDecodeError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def from_openai(messages: list[dict[str, Any]]) -> list[Message]:
    """Request messages -> Messages (tool-call arguments decoded for the template)."""
    out = []
    for m in messages:
        role = m.get("role", "user")
        if role == "developer":
            role = "system"
        calls = [
            ToolCall(
                c.get("function", {}).get("name", ""),
                _arguments(c.get("function", {}).get("arguments")),
                id=c.get("id", ""),
            )
            for c in m.get("tool_calls") or []
        ]
        out.append(
            Message(
                role,
                _text(m.get("content")),
                tool_calls=calls,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
            )
        )
    return out


def same_message(a: Message, b: Message) -> bool:
    """Equal as the client sees them (ids, roles, text, calls); whitespace-insensitive text."""
    if (a.role, a.content.strip()) != (b.role, b.content.strip()):
        return False
    if a.role == "tool" and (a.tool_call_id or "") != (b.tool_call_id or ""):
        return False
    calls = [(c.name, c.arguments, c.id) for c in a.tool_calls]
    return calls == [(c.name, c.arguments, c.id) for c in b.tool_calls]


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def completion(
    model: str, message: Message, finish: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A `chat.completion` response body."""
    body: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        body["tool_calls"] = [tool_call_json(c) for c in message.tool_calls]
    if finish == "stop" and message.tool_calls:
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": body, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
