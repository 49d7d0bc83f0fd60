"""Anthropic's Messages API (`POST /v1/messages`) over the chat-completions path.

Why: the `anthropic` SDK and Claude Code speak Messages. Point them at `http://host/s/ID`
(the SDK appends `/v1/messages`). A request is translated into a chat-completions body
(`system` -> a system message, `tool_use` blocks -> tool calls, `tool_result` blocks -> tool
messages, `stop_sequences` -> `stop`, `tool_choice` any/tool/none -> required/named/none) and
runs the one `gateway` path, so it is recorded into the same token-exact segments; the answer
comes back as `text` / `tool_use` content blocks with Anthropic's `stop_reason`, or streamed as
its events (`message_start`, `content_block_*`, `message_delta`, `message_stop`).

Only client tools exist here: a server tool (`web_search_*`, `bash_*`, ... with a `type`
other than "custom") is a 400. A `system` turn inside `messages` (Claude Code sends its environment and reminders so)
stays a system message where it is. `thinking` blocks of earlier turns are dropped (the template
renders none); `cache_control`, `metadata` and other bookkeeping are ignored. The content of a
turn stopped by a stop sequence keeps it, as it was sampled and recorded (the recorded turn
is what a next request must repeat to stay token-exact).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.serve.gateway import SESSION_HEADER, Gateway, chunk_dicts
from agentrl.serve.limits import HTTPError, ServeLimits, read_json
from agentrl.serve.messages import chat_tools
from agentrl.types import Message

MAPPED = frozenset(
    {"messages", "system", "tools", "tool_choice", "stop_sequences", "stream", "thinking"}
)
STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


def _refuse(message: str) -> HTTPError:
    return HTTPError(400, message)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _refuse(f"{where}.content must be a string or a list of blocks")
    for j, b in enumerate(content):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise _refuse(f"{where}.content[{j}] must be an object with a 'type'")
    return content


def _text(blocks: list[dict[str, Any]]) -> Any:
    """Text blocks as chat content; any other block passes on by type (refused by name)."""
    if all(b["type"] == "text" for b in blocks):
        return "".join(str(b.get("text") or "") for b in blocks)
    return [{"type": "text", "text": b.get("text")} if b["type"] == "text" else b for b in blocks]


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Anthropic messages -> chat messages (a user turn's tool results first, as tool
    messages, then its text)."""
    if not isinstance(messages, list) or not messages:
        raise _refuse("messages must be a non-empty list")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise _refuse(f"{where} must be an object with role 'user', 'assistant' or 'system'")
        blocks = [
            b
            for b in _blocks(m.get("content"), where)
            if b["type"] not in ("thinking", "redacted_thinking")
        ]
        if m["role"] == "system":  # Claude Code's mid-conversation system turn
            out.append({"role": "system", "content": _text(blocks)})
            continue
        if m["role"] == "assistant":
            calls = [
                {
                    "id": b.get("id"),
                    "type": "function",
                    "function": {"name": b.get("name"), "arguments": b.get("input") or {}},
                }
                for b in blocks
                if b["type"] == "tool_use"
            ]
            msg: dict[str, Any] = {
                "role": "assistant",
                "content": _text([b for b in blocks if b["type"] != "tool_use"]),
            }
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        rest = []
        for b in blocks:
            if b["type"] == "tool_result":
                content = b.get("content")
                text = _text(_blocks(content, where)) if content is not None else ""
                out.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": text})
            else:
                rest.append(b)
        if rest or not blocks:
            out.append({"role": "user", "content": _text(rest)})
    return out


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """A client tool's definition as a chat `function` (`input_schema` is its parameters)."""
    fn: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description"):
        fn["description"] = tool["description"]
    fn["parameters"] = tool.get("input_schema") or {"type": "object"}
    return fn


def _tool_choice(choice: Any, chat: dict[str, Any]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(kind or "")
    if kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif mapped:
        chat["tool_choice"] = mapped
    else:
        raise _refuse(f"tool_choice {choice!r:.200} is not supported (auto, any, tool, none)")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


def to_chat(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _refuse("request body must be a JSON object")
    if body.get("mcp_servers"):  # server-side tools this server does not run
        raise _refuse("mcp_servers is not supported: give the tools as client tools")
    chat = {k: v for k, v in body.items() if k not in MAPPED}
    system = body.get("system")
    head = []
    if system:
        head = [{"role": "system", "content": _text(_blocks(system, "system"))}]
    chat["messages"] = head + chat_messages(body.get("messages"))
    tools = chat_tools(body.get("tools"), "custom", _function, untyped=True)
    if tools:
        chat["tools"] = tools
    _tool_choice(body.get("tool_choice"), chat)
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    return chat


def stop_reason(finish: str, text: str, stops: list[str]) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) for a chat finish reason."""
    if finish == "stop":
        hit = next((s for s in stops if s in text), None)
        return ("stop_sequence", hit) if hit else ("end_turn", None)
    return STOP_REASONS.get(finish, "end_turn"), None


def content_blocks(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if message.content:
        out.append({"type": "text", "text": message.content})
    for c in message.tool_calls:
        out.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
    return out


def message_json(
    mid: str,
    model: str,
    content: list[dict[str, Any]],
    reason: str | None,
    sequence: str | None,
    usage: dict[str, int],
) -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage,
    }


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


async def stream_events(
    chunks: AsyncIterator[str], mid: str, model: str, stops: list[str]
) -> AsyncIterator[str]:
    """Chat chunk events -> Messages stream events."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    yield _event("message_start", message=message_json(mid, model, [], None, None, usage))
    index, open_text, text, finish = -1, False, "", "stop"
    async for event in chunks:
        chunk = chunk_dicts(event)
        if chunk is None:
            continue
        if "error" in chunk:
            err = chunk["error"]
            yield _event("error", error={"type": "api_error", "message": err.get("message")})
            return
        if chunk.get("usage"):
            u = chunk["usage"]
            usage = {"input_tokens": u["prompt_tokens"], "output_tokens": u["completion_tokens"]}
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if not open_text:
                    index, open_text = index + 1, True
                    block: dict[str, Any] = {"type": "text", "text": ""}
                    yield _event("content_block_start", index=index, content_block=block)
                text += delta["content"]
                yield _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": delta["content"]},
                )
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if tc.get("id"):  # a call's first chunk: close the text, open a tool_use
                    if open_text:
                        yield _event("content_block_stop", index=index)
                        open_text = False
                    index += 1
                    block = {
                        "type": "tool_use",
                        "id": tc["id"],
                        "name": fn.get("name"),
                        "input": {},
                    }
                    yield _event("content_block_start", index=index, content_block=block)
                    continue
                yield _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": fn.get("arguments") or ""},
                )
                yield _event("content_block_stop", index=index)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if open_text:
        yield _event("content_block_stop", index=index)
    reason, sequence = stop_reason(finish, text, stops)
    yield _event(
        "message_delta", delta={"stop_reason": reason, "stop_sequence": sequence}, usage=usage
    )
    yield _event("message_stop")


def route(gateway: Gateway, limits: ServeLimits) -> Callable[[Request], Any]:
    """The `/v1/messages` handler."""

    async def create(request: Request) -> Any:
        chat = to_chat(await read_json(request, limits))
        out = await gateway.generate(request, chat)
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        headers = {SESSION_HEADER: out.session}
        stops = list(out.req.params.stop)
        if out.events is not None:
            events = stream_events(out.events, mid, out.model, stops)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        assert out.completion is not None
        done = out.completion
        choice = done.choices[0]
        finish = "tool_calls" if choice.message.tool_calls else choice.result.finish_reason
        reason, sequence = stop_reason(finish, choice.text, stops)
        usage = {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens}
        body = message_json(mid, out.model, content_blocks(choice.message), reason, sequence, usage)
        return JSONResponse(body, headers=headers)

    return create
