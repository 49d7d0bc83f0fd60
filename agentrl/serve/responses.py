"""OpenAI's Responses API (`POST /v1/responses`) over the chat-completions path.

Why: the OpenAI Agents SDK's default model, LangChain's `use_responses_api` and Codex speak
Responses, not Chat Completions. A request is translated into a chat-completions body (input
items -> messages, function tools -> tools, `max_output_tokens` -> `max_tokens`) and runs the
one `gateway` path, so it is recorded into the same token-exact segments as any chat call;
the answer is translated back (`message` and `function_call` output items) and, streamed, into
Responses events (`response.created` ... `response.completed`).

Multi-turn: either the client sends the whole history as input items (its earlier outputs
included), or `previous_response_id` names an earlier response whose conversation (its input
and output, not its `instructions`, as OpenAI defines it) this server kept; the session then
defaults to that response's. Kept responses are bounded (`MAX_KEPT`, oldest dropped). Only
function tools exist here; a hosted tool (`web_search`, `file_search`, ...) is a 400. Other
fields follow the chat path: sampling fields not honoured are refused, the rest ignored.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.serve.gateway import SESSION_HEADER, Gateway
from agentrl.serve.limits import HTTPError, ServeLimits, read_json
from agentrl.serve.messages import chat_tools, tool_call_json
from agentrl.serve.responses_stream import (
    assistant_json,
    output_items,
    response_json,
    stream_events,
)

MAX_KEPT = 4096  # responses kept for `previous_response_id`
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text"})
# Responses fields this module maps (the rest pass through to the chat path's checks)
MAPPED = frozenset(
    {
        "input",
        "instructions",
        "previous_response_id",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "text",
        "stream",
        "reasoning",
        "truncation",
        "include",
        "store",
        "background",
        "stream_options",
        "prompt",
        "conversation",
    }
)


def _refuse(message: str) -> HTTPError:
    return HTTPError(400, message)


def _content(content: Any, where: str) -> Any:
    """Responses content (a string or parts) as chat content; non-text parts pass on by
    type, so the chat path refuses them by name."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _refuse(f"{where}.content must be a string or a list of parts")
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise _refuse(f"{where}.content[{j}] must be an object with a 'type'")
        parts.append({"type": "text", "text": part.get("text")} if kind in TEXT_PARTS else part)
    return parts


def input_messages(items: Any) -> list[dict[str, Any]]:
    """`input` (a string or a list of items) -> chat messages. Function calls join the
    assistant message before them (one turn's text and calls are one message)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _refuse("input must be a string or a list of items")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _refuse(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(
                {"role": item.get("role", "user"), "content": _content(item.get("content"), where)}
            )
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _content(output, where)
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": content})
        elif kind == "reasoning":
            continue  # the template renders no reasoning of earlier turns
        else:
            raise _refuse(
                f"{where}.type {kind!r} is not supported (message, function_call, "
                "function_call_output, reasoning are)"
            )
    return out


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool's definition, flat in Responses, as a chat `function`."""
    return {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _refuse(
        f"tool_choice {choice!r:.200} is not supported (auto, none, required, a function)"
    )


def _format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    return {"type": fmt.get("type")}


class Kept:
    """Conversations of earlier responses, for `previous_response_id` (bounded, LRU)."""

    def __init__(self, size: int = MAX_KEPT) -> None:
        self.size = size
        self.items: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()

    def put(self, rid: str, session: str, messages: list[dict[str, Any]]) -> None:
        self.items[rid] = (session, messages)
        self.items.move_to_end(rid)
        while len(self.items) > self.size:
            self.items.popitem(last=False)

    def get(self, rid: Any) -> tuple[str, list[dict[str, Any]]]:
        if not isinstance(rid, str) or rid not in self.items:
            raise HTTPError(404, f"previous_response_id {rid!r:.100} is not kept by this server")
        return self.items[rid]


def to_chat(body: Any, kept: Kept) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the chat-completions body, the conversation without `instructions`)."""
    if not isinstance(body, dict):
        raise _refuse("request body must be a JSON object")
    if body.get("background"):
        raise _refuse("background responses are not supported")
    for key in ("prompt", "conversation"):  # server-side state this server does not have
        if body.get(key) is not None:
            raise _refuse(f"{key} is not supported: send the conversation as input items")
    history: list[dict[str, Any]] = []
    chat = {k: v for k, v in body.items() if k not in MAPPED}
    if body.get("previous_response_id") is not None:
        session, history = kept.get(body["previous_response_id"])
        chat.setdefault("user", session)  # the session, unless the URL or a header names one
    conversation = history + input_messages(body.get("input", []))
    system = body.get("instructions")
    if system is not None and not isinstance(system, str):
        raise _refuse("instructions must be a string")
    chat["messages"] = ([{"role": "system", "content": system}] if system else []) + conversation
    for key, value in (
        ("tools", chat_tools(body.get("tools"), "function", _function)),
        ("tool_choice", _tool_choice(body.get("tool_choice"))),
        ("max_tokens", body.get("max_output_tokens")),
        ("response_format", _format(body.get("text"))),
    ):
        if value is not None:
            chat[key] = value
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    if chat.get("n", 1) != 1:
        raise _refuse("n is not a Responses field")
    return chat, conversation


def route(gateway: Gateway, limits: ServeLimits) -> Callable[[Request], Any]:
    """The `/v1/responses` handler."""
    kept = Kept()

    async def create(request: Request) -> Any:
        body = await read_json(request, limits)
        chat, conversation = to_chat(body, kept)
        out = await gateway.generate(request, chat)
        rid = f"resp_{uuid.uuid4().hex}"
        headers = {SESSION_HEADER: out.session}

        def done(message: dict[str, Any]) -> None:
            kept.put(rid, out.session, [*conversation, message])

        if out.events is not None:
            events = stream_events(out.events, rid, body, out.model, done)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        assert out.completion is not None
        choice = out.completion.choices[0]
        msg = choice.message
        done(assistant_json(msg.content, [tool_call_json(c) for c in msg.tool_calls]))
        u = {
            "prompt_tokens": out.completion.prompt_tokens,
            "completion_tokens": out.completion.completion_tokens,
            "total_tokens": out.completion.prompt_tokens + out.completion.completion_tokens,
        }
        finish = choice.result.finish_reason
        resp = response_json(rid, body, out.model, output_items(msg, finish), finish, u)
        return JSONResponse(resp, headers=headers)

    return create
