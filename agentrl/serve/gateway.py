"""The one request path behind every wire format: a chat-completions body in, a `Completion`
(or its chunk stream) out, recorded token-exactly under the request's session.

Why one path: the Responses and Anthropic Messages routes translate their bodies into a
chat-completions body (`responses`, `anthropic`) and their answers back, so checking,
rendering, generation, recording and the limits are the same code for every client.

Sessions: the path's `/s/{session}/...` (a session-scoped base URL: an unmodified harness is
pointed at `http://host/s/ID/v1`, or `http://host/s/ID` for Anthropic's SDK), else the
`X-Session-ID` header, else the body's `user`, else a fresh id. Every response carries the id
in its `X-Session-ID` header, so even an unconfigured client's session can be found and scored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.serve.generate import Completion, Server
from agentrl.serve.limits import HTTPError, ServeLimits
from agentrl.serve.request import ChatRequest, RequestError, parse_request

SESSION_HEADERS = ("x-session-id", "x-agentrl-session")
SESSION_HEADER = "X-Session-ID"


def session_id(request: Request, req: ChatRequest | None, limits: ServeLimits) -> str:
    """The path's session, else the `X-Session-Id` header, else the body's `user`, else a
    fresh id."""
    sid = request.path_params.get("session") or next(
        (request.headers[h] for h in SESSION_HEADERS if h in request.headers), None
    )
    if sid is not None and len(sid) > limits.max_id_chars:
        raise HTTPError(400, f"session id has {len(sid)} characters, over {limits.max_id_chars}")
    return sid or (req.user if req else None) or f"anon-{uuid.uuid4().hex[:12]}"


@dataclass
class Generated:
    """One request's answer: `completion`, or with `stream` the chat chunk events."""

    req: ChatRequest
    session: str
    model: str
    completion: Completion | None = None
    events: AsyncIterator[str] | None = None


class Gateway:
    """Check, generate and record one chat-completions body (every route's shared path)."""

    def __init__(
        self,
        server: Server,
        chat: ChatFormat,
        sampling: SamplingConfig,
        limits: ServeLimits,
        model_name: str,
        force_first_tool_call: str = "",
    ) -> None:
        self.server, self.chat, self.cfg, self.limits = server, chat, sampling, limits
        self.model_name = model_name
        self.force_first_tool_call = force_first_tool_call

    def forced(self, req: ChatRequest, sid: str) -> ChatRequest:
        """With `force_first_tool_call` (a test and bootstrap option; "" is off, the default):
        a new session's first request that offers tools under `tool_choice: auto` is sampled
        as one grammar-constrained call, of the tool it names if the request offers it, else
        of any ("required"), so a model that would not call a tool yet (a random-init one
        behind an unchanged CLI that always sends `auto`) still makes the episode use one.
        The turn says so in `metadata["constrained_turns"]`."""
        if (
            not self.force_first_tool_call
            or not req.tools
            or req.tool_choice != "auto"
            or sid in self.server.recorder.sessions
        ):
            return req
        names = {t["function"]["name"] for t in req.tools}
        name = self.force_first_tool_call
        choice: str | dict[str, Any] = "required"
        if name in names:
            choice = {"name": name}  # the parsed form of a named tool_choice
        return dataclasses.replace(
            req, tool_choice=choice, parallel_tool_calls=False, forced_by_server=True
        )

    async def generate(self, request: Request, body: Any) -> Generated:
        """Refusals raise `HTTPError` (400s naming the field; `context_length_exceeded` for
        a prompt over the context, streamed or not: it is refused before a stream starts)."""
        try:
            req = parse_request(body, self.chat, self.cfg, self.limits)
            sid = session_id(request, req, self.limits)
            request.state.session = sid
            req = self.forced(req, sid)
            self.server.precheck(req)  # the token budget from the length alone, before work
            prepared = await asyncio.to_thread(self.server.check, req)
            model = req.model or self.model_name
            if req.stream:
                events = await self.server.open_stream(req, prepared, sid, model)
                return Generated(req, sid, model, events=events)
            result = await self.server.complete(req, prepared, sid)
        except RequestError as e:
            raise HTTPError(400, str(e), code=e.code) from e
        if isinstance(result, RequestError):
            raise HTTPError(400, str(result), code=result.code)
        if isinstance(result, Exception):
            raise HTTPError(500, f"engine failed: {result}", "server_error")
        return Generated(req, sid, model, completion=result)


def chunk_dicts(event: str) -> dict[str, Any] | None:
    """The JSON object of one chat-completions SSE event (None for `[DONE]`)."""
    data = event.removeprefix("data: ").strip()
    return None if data == "[DONE]" or not data else json.loads(data)
