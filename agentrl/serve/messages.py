"""OpenAI chat-completions wire format <-> agentrl `Message`s, and the other wire formats'
tool definitions (Anthropic Messages, OpenAI Responses) as chat-completions tools."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentrl.chat import bounded_json
from agentrl.serve.limits import HTTPError
from agentrl.types import Message, ToolCall


def _text(content: Any) -> str:
    """OpenAI content: a string, null, or a list of parts (text parts are joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        kinds = {p.get("type") if isinstance(p, dict) else type(p).__name__ for p in content}
        if kinds - {"text"}:  # an image the text template would silently drop
            raise ValueError(f"content parts of type {sorted(map(str, kinds - {'text'}))}")
        return "".join(p.get("text", "") for p in content)
    return str(content)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = bounded_json.loads(raw) if raw else {}
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


def chat_tools(
    tools: Any,
    kind: str,
    to_function: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    untyped: bool = False,
) -> list[dict[str, Any]] | None:
    """Another wire format's `tools` as chat-completions tools (None for none).

    Only the format's client-run tools exist here (type `kind`; `untyped`: a definition with no
    `type` is one): a hosted or server tool is a 400 naming its index and type.
    `to_function` maps one definition to the chat `function` object, in OpenAI's key order
    (name, description, parameters): the chat template renders the tools as JSON."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise HTTPError(400, "tools must be a list")
    out = []
    for i, t in enumerate(tools):
        got = t.get("type", kind if untyped else None) if isinstance(t, dict) else t
        if not isinstance(t, dict) or got != kind:
            raise HTTPError(400, f"tools[{i}]: only {kind} tools are served, got {got!r}")
        out.append({"type": "function", "function": to_function(t)})
    return out or None


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


def token_logprob(chat: Any, token: int, logprob: float) -> dict[str, Any]:
    """One OpenAI logprob entry; `token` is the token's text (as vLLM reports it)."""
    text = chat.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def logprob_entries(
    chat: Any, ids: list[int], logprobs: list[float], top: list[list[tuple[int, float]]]
) -> list[dict[str, Any]]:
    """`choices[i].logprobs.content` for sampled tokens: exactly the recorded logprobs (the
    temperature-scaled model distribution, before any constraint mask), one per token,
    stop token included."""
    out = []
    for i, (tok, lp) in enumerate(zip(ids, logprobs, strict=True)):
        entry = token_logprob(chat, tok, lp)
        entry["top_logprobs"] = [token_logprob(chat, t, v) for t, v in top[i]] if top else []
        out.append(entry)
    return out


def finish_reason(finish: str, message: Message) -> str:
    return "tool_calls" if finish == "stop" and message.tool_calls else finish


def choice_json(
    index: int, message: Message, finish: str, logprobs: list[dict[str, Any]] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        body["tool_calls"] = [tool_call_json(c) for c in message.tool_calls]
    return {
        "index": index,
        "message": body,
        "finish_reason": finish_reason(finish, message),
        "logprobs": None if logprobs is None else {"content": logprobs},
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A `chat.completion` response body."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
    }
