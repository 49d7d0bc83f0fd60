"""The Responses API's answer: output items, the `response` object and its stream events.

Kept apart from `responses` (the request's translation and the route) so each stays small:
this side only reshapes what the one chat path produced. Streamed, chat chunks become
`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta` / `.done`,
`response.function_call_arguments.delta` / `.done`, `response.output_item.done` and
`response.completed` (`response.incomplete` when `max_output_tokens` cut it), each numbered by
`sequence_number`, as OpenAI sends them; an engine failure after the start is an `error`
event and `response.failed`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentrl.serve.gateway import chunk_dicts
from agentrl.types import Message


def output_items(message: Message, finish: str | None) -> list[dict[str, Any]]:
    """The turn's output items; its text cut by the token limit is an `incomplete` item, as
    OpenAI marks it (not only the response)."""
    out: list[dict[str, Any]] = []
    if message.content:
        status = _ended(finish)
        out.append(_message_item(f"msg_{uuid.uuid4().hex[:24]}", message.content, status))
    for c in message.tool_calls:
        out.append(_call_item(c.id, c.name, json.dumps(c.arguments)))
    return out


def _ended(finish: str | None) -> str:
    """The status of a finished response or item: `incomplete` when the token limit cut it."""
    return "incomplete" if finish == "length" else "completed"


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
    status = "in_progress" if finish is None else _ended(finish)
    incomplete = status == "incomplete"
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
        # `finish` is known only for the last text item, the one a token limit cut
        at, item = len(output), _message_item(msg_id, text, _ended(finish))
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
    # OpenAI ends a response cut by max_output_tokens with `response.incomplete`; SDKs read
    # the terminal event (the Agents SDK treats it as it treats `status: incomplete`).
    yield w.event(f"response.{final['status']}", response=final)
