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

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.serve.gateway import SESSION_HEADER, Gateway, chunk_dicts
from agentrl.serve.limits import HTTPError, ServeLimits, read_json
from agentrl.serve.messages import tool_call_json
from agentrl.types import Message

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


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _refuse("tools must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else t
            raise _refuse(f"tools[{i}]: only function tools are served, got {kind!r}")
        fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
        out.append({"type": "function", "function": fn})
    return out or None


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
        ("tools", _tools(body.get("tools"))),
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


def output_items(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if message.content:
        out.append(_message_item(f"msg_{uuid.uuid4().hex[:24]}", message.content))
    for c in message.tool_calls:
        out.append(_call_item(c.id, c.name, json.dumps(c.arguments)))
    return out


def _message_item(iid: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": iid, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_json(
    rid: str,
    body: dict[str, Any],
    model: str,
    output: list[dict[str, Any]],
    finish: str | None,
    usage: dict[str, int] | None,
) -> dict[str, Any]:
    incomplete = finish == "length"
    status = "in_progress" if finish is None else ("incomplete" if incomplete else "completed")
    u = usage or {}
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "text": body.get("text") or {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        "usage": None
        if usage is None
        else {
            "input_tokens": u["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["total_tokens"],
        },
    }


def assistant_json(content: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn as a chat message (what `previous_response_id` continues from)."""
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return out


class EventWriter:
    """Responses SSE events (`event:` + `data:`, numbered) from chat chunks of one choice."""

    def __init__(self) -> None:
        self.seq = 0

    def event(self, kind: str, **data: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n"


async def stream_events(
    chunks: AsyncIterator[str],
    rid: str,
    body: dict[str, Any],
    model: str,
    done: Callable[[dict[str, Any]], None],
) -> AsyncIterator[str]:
    """Chat chunk events -> Responses events; `done(assistant message)` once it completes."""
    w = EventWriter()
    yield w.event("response.created", response=response_json(rid, body, model, [], None, None))
    yield w.event("response.in_progress", response=response_json(rid, body, model, [], None, None))
    output: list[dict[str, Any]] = []
    text, msg_id, calls = "", "", []  # open text item; tool calls (chat form)
    finish, usage = None, None

    def close_text() -> list[str]:
        nonlocal msg_id
        if not msg_id:
            return []
        at, item = len(output), _message_item(msg_id, text)
        part = item["content"][0]
        output.append(item)
        msg_id = ""
        common = {"item_id": item["id"], "output_index": at, "content_index": 0}
        return [
            w.event("response.output_text.done", text=text, logprobs=[], **common),
            w.event("response.content_part.done", part=part, **common),
            w.event("response.output_item.done", output_index=at, item=item),
        ]

    async for event in chunks:
        chunk = chunk_dicts(event)
        if chunk is None:
            continue
        if "error" in chunk:
            err = chunk["error"]
            yield w.event("error", code=err.get("type"), message=err.get("message"), param=None)
            yield w.event(
                "response.failed",
                response={
                    **response_json(rid, body, model, output, "error", None),
                    "status": "failed",
                    "error": {"code": "server_error", "message": err.get("message")},
                },
            )
            return
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if not msg_id:
                    msg_id = f"msg_{uuid.uuid4().hex[:24]}"
                    item = {**_message_item(msg_id, "", "in_progress"), "content": []}
                    yield w.event("response.output_item.added", output_index=len(output), item=item)
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    yield w.event(
                        "response.content_part.added",
                        item_id=msg_id,
                        output_index=len(output),
                        content_index=0,
                        part=part,
                    )
                text += delta["content"]
                yield w.event(
                    "response.output_text.delta",
                    item_id=msg_id,
                    output_index=len(output),
                    content_index=0,
                    delta=delta["content"],
                    logprobs=[],
                )
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if tc.get("id"):  # a call's first chunk: id and name
                    for e in close_text():
                        yield e
                    calls.append(
                        {
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": fn.get("name"), "arguments": ""},
                        }
                    )
                    item = _call_item(tc["id"], fn.get("name") or "", "", "in_progress")
                    yield w.event("response.output_item.added", output_index=len(output), item=item)
                    continue
                args = fn.get("arguments") or ""
                call = calls[-1]
                call["function"]["arguments"] += args
                item = _call_item(
                    call["id"], call["function"]["name"], call["function"]["arguments"]
                )
                yield w.event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=len(output),
                    delta=args,
                )
                yield w.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=len(output),
                    arguments=item["arguments"],
                )
                yield w.event("response.output_item.done", output_index=len(output), item=item)
                output.append(item)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    for e in close_text():
        yield e
    content = "".join(i["content"][0]["text"] for i in output if i["type"] == "message")
    done(assistant_json(content, calls))
    final = response_json(rid, body, model, output, finish or "stop", usage)
    yield w.event("response.completed", response=final)


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
        resp = response_json(
            rid, body, out.model, output_items(msg), choice.result.finish_reason, u
        )
        return JSONResponse(resp, headers=headers)

    return create
