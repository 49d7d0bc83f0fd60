"""`agentrl serve`: an OpenAI-compatible `/v1/chat/completions` server over any Engine.

Point an unmodified agent (OpenAI SDK, LangChain, verifiers, ...) at it; every session's exact
token ids, logprobs and loss mask are recorded into `Trajectory` segments (see `recorder`),
and with `out` each finished request is appended to a file at once (see `journal`).

Needs the `serve` extra (fastapi, uvicorn; llguidance for `response_format` / forced
`tool_choice`). Endpoints:
* `POST /v1/chat/completions`: `stream`, `n`, `logprobs`/`top_logprobs`, `tool_choice`
  (none/auto/required/named, enforced by constrained decoding), `response_format` (json_object,
  json_schema), `seed`, `stop`, `return_token_ids`; a field that would change sampling and
  is not honoured gets a 400 naming it, any other is ignored with a logged note (`request`).
* `POST /v1/responses`: OpenAI's Responses API (see `responses`).
* `POST /v1/messages`: Anthropic's Messages API (see `anthropic`).
* every generation route also under `/s/{session}/...`: a session-scoped base URL (see
  `gateway`, which is the one path all three share); every response has `X-Session-ID`.
* `GET  /v1/models`
* `GET  /v1/trajectories[?session=ID&clear=true]`: recorded segments as JSON (admin).
* `POST /v1/trajectories/{session}/reward` `{"reward": float}`: score a session (admin;
  the reward must be a finite number; an unknown session is a 404).
* `GET  /health`

Admin endpoints need `Authorization: Bearer <token>`, the server's per-run token
(`admin_token`, else a fresh one in `app.state.admin_token`; the CLI prints it and writes it
next to `--out`). Generation stays open to the local agent, which must not hold the token:
it could otherwise score or erase its own episodes. Sizes are capped by `ServeLimits` (see
`limits`); a refused request is a 4xx and leaves no session behind.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine
from agentrl.serve import anthropic, responses
from agentrl.serve.gateway import SESSION_HEADER, Gateway, session_id
from agentrl.serve.generate import Server, choices_json
from agentrl.serve.journal import Journal
from agentrl.serve.limits import AdminAuth, HTTPError, ServeLimits, new_token, read_json
from agentrl.serve.messages import completion
from agentrl.serve.provenance import recorded_metadata
from agentrl.serve.recorder import SessionRecorder

__all__ = ["create_app", "session_id"]


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def add_route(app: FastAPI, path: str, fn: Callable[..., Any], method: str = "POST") -> None:
    """`path` and its session-scoped twin `/s/{session}` + `path`."""
    for full in (path, "/s/{session}" + path):
        app.add_api_route(full, fn, methods=[method])


def reward_value(body: object) -> float:
    """The reward of a `{"reward": number}` body; a 400 for anything else (NaN included)."""
    if not isinstance(body, dict) or set(body) != {"reward"}:
        raise HTTPError(400, 'the body must be {"reward": <number>}')
    value = body["reward"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HTTPError(400, f"reward must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise HTTPError(400, f"reward must be finite, got {value!r}")
    return float(value)


def create_app(
    engine: Engine,
    chat: ChatFormat,
    *,
    model_name: str = "agentrl",
    sampling: SamplingConfig | None = None,
    out: str | Path | None = None,
    tokenizer_name: str | None = None,
    request_timeout_s: float = 600.0,
    fsync: bool = False,
    limits: ServeLimits | None = None,
    admin_token: str | None = None,
    force_first_tool_call: str = "",
) -> FastAPI:
    """The FastAPI app. `out`: append every finished request's segment there (JSONL, see
    `journal`), compacted on shutdown. `tokenizer_name`: what to record as the tokenizer
    (e.g. the `--model` argument), default the tokenizer's own path. `limits`: request caps
    (default `ServeLimits()`). `admin_token`: the bearer token of the admin endpoints
    (default a fresh one, in `app.state.admin_token`). `force_first_tool_call`: "required" or a
    tool's name samples each session's first request with tools and `tool_choice: auto` as
    one call (of that tool where offered); "" (the default) is off (see `Gateway.forced`)."""
    cfg = sampling or SamplingConfig()
    limits = limits or ServeLimits()
    auth = AdminAuth(admin_token or new_token())
    journal = Journal(out, fsync=fsync) if out else None
    recorder = SessionRecorder(
        chat,
        recorded_metadata(chat, model_name, tokenizer_name),
        journal.append if journal else None,
        run=uuid.uuid4().hex[:8],
    )
    server = Server(engine, chat, recorder, request_timeout_s, limits)
    gateway = Gateway(server, chat, cfg, limits, model_name, force_first_tool_call)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        if journal is not None:
            journal.close()
            journal.compact()

    app = FastAPI(title="agentrl serve", lifespan=lifespan)
    app.state.recorder = recorder
    app.state.journal = journal
    app.state.limits = limits
    app.state.admin_token = auth.token

    async def admin(request: Request) -> None:
        auth.check(request.headers.get("authorization"))

    @app.exception_handler(HTTPError)
    async def refused(request: Request, e: HTTPError) -> JSONResponse:
        sid = getattr(request.state, "session", None) or request.path_params.get("session")
        return e.response(request.url.path.endswith("/v1/messages"), sid)

    @app.exception_handler(RequestValidationError)
    async def bad_field(request: Request, e: RequestValidationError) -> JSONResponse:
        where = ", ".join(".".join(map(str, err.get("loc", ()))) for err in e.errors())
        return _error(400, f"invalid request field(s): {where or e}")

    async def chat_completions(request: Request) -> Any:
        out = await gateway.generate(request, await read_json(request, limits))
        headers = {SESSION_HEADER: out.session}
        if out.events is not None:
            return StreamingResponse(out.events, media_type="text/event-stream", headers=headers)
        assert out.completion is not None
        done = out.completion
        # n x max_tokens logprob entries decode token by token: off the loop too
        choices = await asyncio.to_thread(choices_json, chat, out.req, done)
        body = completion(out.model, choices, done.prompt_tokens, done.completion_tokens)
        if out.req.return_token_ids:  # vLLM's name
            body["prompt_token_ids"] = done.prompt_ids
        return JSONResponse(body, headers=headers)

    async def models(request: Request) -> Any:
        body = {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "owned_by": "agentrl"}],
        }
        sid = request.path_params.get("session") or request.headers.get(SESSION_HEADER)
        return JSONResponse(body, headers={SESSION_HEADER: sid} if sid else None)

    add_route(app, "/v1/chat/completions", chat_completions)
    add_route(app, "/v1/models", models, "GET")
    add_route(app, "/v1/responses", responses.route(gateway, limits))
    add_route(app, "/v1/messages", anthropic.route(gateway, limits))

    @app.get("/v1/trajectories", dependencies=[Depends(admin)])
    async def trajectories(session: str | None = None, clear: bool = False) -> Any:
        trajs = [t.to_dict() for t in recorder.trajectories(session)]
        if clear:
            recorder.clear(session)
        return {"object": "list", "data": trajs}

    @app.post("/v1/trajectories/{session}/reward", dependencies=[Depends(admin)])
    async def reward(session: str, request: Request) -> Any:
        value = reward_value(await read_json(request, limits))
        if session not in recorder.sessions:
            raise HTTPError(404, f"no session {session[:200]!r} was recorded", "not_found_error")
        n = recorder.set_reward(session, value)
        return {"session": session, "segments": n}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "sessions": len(recorder.sessions)}

    return app
