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
* `GET  /v1/trajectories[?session=ID&clear=true]`: recorded segments as JSON.
* `POST /v1/trajectories/{session}/reward` `{"reward": float}`: score a session.
* `GET  /health`
"""

from __future__ import annotations

import hashlib
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine
from agentrl.serve.generate import Completion, Server, choices_json
from agentrl.serve.journal import Journal
from agentrl.serve.messages import completion
from agentrl.serve.recorder import SessionRecorder
from agentrl.serve.request import RequestError, parse_request

SESSION_HEADERS = ("x-session-id", "x-agentrl-session")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


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
) -> FastAPI:
    """The FastAPI app. `out`: append every finished request's segment there (JSONL, see
    `journal`), compacted on shutdown. `tokenizer_name`: what to record as the tokenizer
    (e.g. the `--model` argument), default the tokenizer's own path."""
    cfg = sampling or SamplingConfig()
    journal = Journal(out, fsync=fsync) if out else None
    recorder = SessionRecorder(
        chat,
        recorded_metadata(chat, model_name, tokenizer_name),
        journal.append if journal else None,
        run=uuid.uuid4().hex[:8],
    )
    server = Server(engine, chat, recorder, request_timeout_s)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        if journal is not None:
            journal.close()
            journal.compact()

    app = FastAPI(title="agentrl serve", lifespan=lifespan)
    app.state.recorder = recorder
    app.state.journal = journal

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError as e:
            return _error(400, f"request body is not JSON: {e}")
        try:
            req = parse_request(body, chat, cfg)
            prepared = server.check(req)
        except RequestError as e:
            return _error(400, str(e))
        sid = next((request.headers[h] for h in SESSION_HEADERS if h in request.headers), None)
        sid = sid or req.user or f"anon-{uuid.uuid4().hex[:12]}"
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
        return completion(
            model, choices_json(chat, req, result), result.prompt_tokens, result.completion_tokens
        )

    @app.get("/v1/models")
    async def models() -> Any:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "owned_by": "agentrl"}],
        }

    @app.get("/v1/trajectories")
    async def trajectories(session: str | None = None, clear: bool = False) -> Any:
        trajs = [t.to_dict() for t in recorder.trajectories(session)]
        if clear:
            recorder.clear(session)
        return {"object": "list", "data": trajs}

    @app.post("/v1/trajectories/{session}/reward")
    async def reward(session: str, request: Request) -> Any:
        body = await request.json()
        n = recorder.set_reward(session, float(body["reward"]))
        return {"session": session, "segments": n}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "sessions": len(recorder.sessions)}

    return app
