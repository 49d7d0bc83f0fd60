"""`agentrl serve`: an OpenAI-compatible `/v1/chat/completions` server over any Engine.

Point an unmodified agent (OpenAI SDK, LangChain, ...) at it; every session's exact token
ids, logprobs and loss mask are recorded into `Trajectory` segments (see `recorder`).

Needs the `serve` extra (fastapi, uvicorn). Endpoints:
* `POST /v1/chat/completions`: non-streaming, n=1. The session is the `X-Session-Id`
  header, else the body's `user`, else a fresh id per request.
* `GET  /v1/models`
* `GET  /v1/trajectories[?session=ID&clear=true]`: recorded segments as JSON.
* `POST /v1/trajectories/{session}/reward` `{"reward": float}`: score a session.
* `GET  /health`
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine, GenerateResult, SamplingParams
from agentrl.serve.messages import completion, from_openai
from agentrl.serve.recorder import SessionRecorder
from agentrl.types import Message, write_jsonl

SESSION_HEADERS = ("x-session-id", "x-agentrl-session")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def request_params(body: dict[str, Any], chat: ChatFormat, cfg: SamplingConfig) -> SamplingParams:
    """OpenAI request fields -> SamplingParams; unset fields fall back to the config."""
    stop = body.get("stop") or list(cfg.stop)
    max_new = body.get("max_completion_tokens") or body.get("max_tokens") or cfg.max_new_tokens
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    return SamplingParams(
        max_new_tokens=int(max_new),
        temperature=float(cfg.temperature if temperature is None else temperature),
        top_p=float(cfg.top_p if top_p is None else top_p),
        top_k=int(body.get("top_k") or cfg.top_k),
        stop_token_ids=list(chat.stop_token_ids),
        stop=[stop] if isinstance(stop, str) else list(stop),
        seed=body.get("seed"),
    )


def assistant_message(chat: ChatFormat, out: GenerateResult, turn: int) -> tuple[str, Message]:
    """(sampled text, the assistant message the client sees). Calls that failed to parse
    stay in the content as text, so the client never gets an unusable call."""
    text = chat.sampled_text(out.token_ids)
    content, calls = chat.parse(text)
    good = [c for c in calls if not c.parse_error]
    if len(good) != len(calls):
        content = text.strip()
    for i, c in enumerate(good):
        c.id = f"call_{turn}_{i}_{uuid.uuid4().hex[:6]}"
    return text, Message("assistant", content, tool_calls=good)


async def complete(
    engine: Engine,
    chat: ChatFormat,
    recorder: SessionRecorder,
    params: SamplingParams,
    body: dict[str, Any],
    sid: str,
    model_name: str,
) -> Any:
    """One chat completion within session `sid`, recorded token-exact."""
    messages = from_openai(body["messages"])
    tools = body.get("tools") or None
    session = recorder.session(sid)
    async with session.lock:  # a session's turns are sequential by nature
        try:
            ids, traj = recorder.prepare(session, messages, tools)
        except Exception as e:  # noqa: BLE001 - a template that cannot render this request
            return _error(400, f"cannot render messages: {e}")
        try:
            result = await engine.generate(ids, params, session_id=sid)
            if result.finish_reason in ("error", "abort"):
                raise RuntimeError(result.error or result.finish_reason)
        except Exception as e:  # noqa: BLE001 - reported to the client, recorded
            recorder.fail(session, traj, str(e))
            return _error(500, f"engine failed: {e}", "server_error")
        text, message = assistant_message(chat, result, len(traj.turns))
        recorder.commit(session, traj, result, text, message)
    model = body.get("model") or model_name
    return completion(model, message, result.finish_reason, len(ids), len(result.token_ids))


def create_app(
    engine: Engine,
    chat: ChatFormat,
    *,
    model_name: str = "agentrl",
    sampling: SamplingConfig | None = None,
    out: str | Path | None = None,
) -> FastAPI:
    """The FastAPI app. `out`: write every recorded trajectory there (JSONL) on shutdown."""
    cfg = sampling or SamplingConfig()
    recorder = SessionRecorder(chat)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        if out:
            write_jsonl(out, recorder.trajectories())

    app = FastAPI(title="agentrl serve", lifespan=lifespan)
    app.state.recorder = recorder

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = await request.json()
        if body.get("stream"):
            return _error(400, "stream=true is not supported")
        if int(body.get("n") or 1) != 1:
            return _error(400, "only n=1 is supported")
        if not body.get("messages"):
            return _error(400, "messages must be a non-empty list")
        sid = next((request.headers[h] for h in SESSION_HEADERS if h in request.headers), None)
        sid = sid or body.get("user") or f"anon-{uuid.uuid4().hex[:12]}"
        return await complete(
            engine, chat, recorder, request_params(body, chat, cfg), body, sid, model_name
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
