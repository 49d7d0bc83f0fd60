"""`agentrl serve`: an OpenAI-compatible `/v1/chat/completions` server over any Engine.

Point an unmodified agent (OpenAI SDK, LangChain, verifiers, ...) at it; every session's exact
token ids, logprobs and loss mask are recorded into `Trajectory` segments (see `recorder`),
and with `out` each finished request is appended to a file at once (see `journal`).

Needs the `serve` extra (fastapi, uvicorn; llguidance for `response_format` / forced
`tool_choice`). Endpoints:
* `POST /v1/chat/completions`: `stream`, `n`, `logprobs`/`top_logprobs`, `tool_choice`
  (none/auto/required/named, enforced by constrained decoding), `response_format` (json_object,
  json_schema), `seed`, `stop`; any other field gets a 400 naming it (see `request`). The
  session is the `X-Session-Id` header, else the body's `user`, else a fresh id per request.
* `GET  /v1/models`
* `GET  /v1/trajectories[?session=ID&clear=true]`: recorded segments as JSON (admin).
* `POST /v1/trajectories/{session}/reward` `{"reward": float}`: score a session (admin;
  the reward must be a finite number).
* `GET  /health`

Admin endpoints need `Authorization: Bearer <token>`, the server's per-run token
(`admin_token`, else a fresh one in `app.state.admin_token`; the CLI prints it and writes it
next to `--out`). Generation stays open to the local agent, which must not hold the token:
it could otherwise score or erase its own episodes. Sizes are capped by `ServeLimits` (see
`limits`); a refused request is a 4xx and leaves no session behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine
from agentrl.serve.generate import Completion, Server, choices_json
from agentrl.serve.journal import Journal
from agentrl.serve.limits import AdminAuth, HTTPError, ServeLimits, new_token, read_json
from agentrl.serve.messages import completion
from agentrl.serve.recorder import SessionRecorder
from agentrl.serve.request import ChatRequest, RequestError, parse_request

SESSION_HEADERS = ("x-session-id", "x-agentrl-session")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def session_id(request: Request, req: ChatRequest, limits: ServeLimits) -> str:
    """The `X-Session-Id` header, else the body's `user`, else a fresh id."""
    sid = next((request.headers[h] for h in SESSION_HEADERS if h in request.headers), None)
    if sid is not None and len(sid) > limits.max_id_chars:
        raise HTTPError(400, f"session id has {len(sid)} characters, over {limits.max_id_chars}")
    return sid or req.user or f"anon-{uuid.uuid4().hex[:12]}"


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


def recorded_metadata(chat: ChatFormat, model_name: str, tokenizer: str | None) -> dict:
    """What every segment records about how its ids were made: the tokenizer to decode them
    (`agentrl view` reads `tokenizer`), the chat template and tool format."""
    template = chat.chat_template or ""
    return {
        "tokenizer": tokenizer or getattr(chat.tokenizer, "name_or_path", "") or "",
        "chat_template": template,
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
        "tool_format": chat.tool_format,
        "served_model": model_name,
    }


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
) -> FastAPI:
    """The FastAPI app. `out`: append every finished request's segment there (JSONL, see
    `journal`), compacted on shutdown. `tokenizer_name`: what to record as the tokenizer
    (e.g. the `--model` argument), default the tokenizer's own path. `limits`: request caps
    (default `ServeLimits()`). `admin_token`: the bearer token of the admin endpoints
    (default a fresh one, in `app.state.admin_token`)."""
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
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def bad_field(request: Request, e: RequestValidationError) -> JSONResponse:
        where = ", ".join(".".join(map(str, err.get("loc", ()))) for err in e.errors())
        return _error(400, f"invalid request field(s): {where or e}")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = await read_json(request, limits)
        try:
            req = parse_request(body, chat, cfg, limits)
            sid = session_id(request, req, limits)
            server.precheck(req)  # the token budget from the length alone, before any work
            prepared = await asyncio.to_thread(server.check, req)
        except RequestError as e:
            return _error(400, str(e))
        model = req.model or model_name
        if req.stream:
            return StreamingResponse(
                server.stream(req, prepared, sid, model), media_type="text/event-stream"
            )
        result = await server.complete(req, prepared, sid)
        if isinstance(result, RequestError):
            return _error(400, str(result))
        if isinstance(result, Exception):
            return _error(500, f"engine failed: {result}", "server_error")
        assert isinstance(result, Completion)
        # n x max_tokens logprob entries decode token by token: off the loop too
        choices = await asyncio.to_thread(choices_json, chat, req, result)
        return completion(model, choices, result.prompt_tokens, result.completion_tokens)

    @app.get("/v1/models")
    async def models() -> Any:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "owned_by": "agentrl"}],
        }

    @app.get("/v1/trajectories", dependencies=[Depends(admin)])
    async def trajectories(session: str | None = None, clear: bool = False) -> Any:
        trajs = [t.to_dict() for t in recorder.trajectories(session)]
        if clear:
            recorder.clear(session)
        return {"object": "list", "data": trajs}

    @app.post("/v1/trajectories/{session}/reward", dependencies=[Depends(admin)])
    async def reward(session: str, request: Request) -> Any:
        n = recorder.set_reward(session, reward_value(await read_json(request, limits)))
        return {"session": session, "segments": n}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "sessions": len(recorder.sessions)}

    return app
