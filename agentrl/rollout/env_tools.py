"""The env's own tools, served to a harness agent over HTTP: `POST /s/{session}/env/tools/{name}`.

Why: a harness agent runs in its own process, outside the env. For an env graded on its own
state (the SWE env grades the files in its sandboxed workspace), an agent that edits files
on the host changes nothing the grader sees. So while an episode's agent runs, the trainer
serves that episode's env tools next to the model: one call is one `env.astep` with that tool
call, run by the env in its own sandbox with its own checks, timeouts and output caps, and
the grader later scores the state those calls left. The agent needs only the URL
(`task["tools_url"]`) and plain HTTP: `{"arguments": {...}}` in, `{"output": text, "done":
bool}` out.

The env's rules hold: a call that ends the env's episode (`submit`, `max_turns`) fixes the
reward then (`EnvSession.ended`), and later calls are a 409. Calls of one session run one at
a time. The route is only open while the session's agent runs (404 before and after), so
nothing the agent left behind can change the workspace after it is graded.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentrl.rollout.episode import error_text
from agentrl.serve.limits import HTTPError, ServeLimits, read_json
from agentrl.types import Message, ToolCall

SESSION_HEADER = "x-session-id"
ROUTE = "/env/tools/{name}"
OUTPUT_CHARS = 200_000  # per call, on top of the env's own caps


def tools_url(root: str, session: str) -> str:
    """Where the agent of `session` calls its env's tools (append `/<tool name>`)."""
    return f"{root}/s/{session}/env/tools"


@dataclass
class EnvSession:
    """One open episode's env: its calls, and how it ended if a call ended it."""

    env: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0
    ended: tuple[float, dict[str, Any]] | None = None  # (reward, info) of the ending step
    error: str = ""  # set when the env itself raised on a call (an env_error, not a reward)


class EnvTools:
    """The session -> env table behind the route (one per gateway host)."""

    def __init__(self, limits: ServeLimits | None = None) -> None:
        self.limits = limits or ServeLimits()
        self.sessions: dict[str, EnvSession] = {}

    def open(self, session: str, env: Any) -> EnvSession:
        self.sessions[session] = EnvSession(env)
        return self.sessions[session]

    async def close(self, session: str) -> EnvSession | None:
        """Stop serving `session`; returns once a call in flight has finished."""
        s = self.sessions.pop(session, None)
        if s is not None:
            async with s.lock:
                pass
        return s

    def mount(self, app: Any) -> None:
        """Add the route to the gateway's FastAPI `app` (fastapi is imported only here)."""
        from fastapi import Request

        async def endpoint(request: Request, name: str) -> dict[str, Any]:
            return await self.route(request, name)

        endpoint.__annotations__.update(request=Request, name=str)  # resolved here, not by name
        app.add_api_route(ROUTE, endpoint, methods=["POST"], response_model=None)

    async def route(self, request: Any, name: str) -> dict[str, Any]:
        session = request.headers.get(SESSION_HEADER, "")
        s = self.sessions.get(session)
        if s is None:
            raise HTTPError(404, f"no env is open for session {session[:200]!r}", "not_found_error")
        body = await read_json(request, self.limits)
        args = body.get("arguments", {}) if isinstance(body, dict) else None
        if not isinstance(args, dict):
            raise HTTPError(400, 'the body must be {"arguments": {...}}')
        async with s.lock:
            if self.sessions.get(session) is not s:
                raise HTTPError(404, f"session {session[:200]!r} has closed", "not_found_error")
            if s.ended is not None:
                raise HTTPError(409, "the env's episode is over (submitted or out of turns)")
            return await self._call(s, name, args)

    async def _call(self, s: EnvSession, name: str, args: dict[str, Any]) -> dict[str, Any]:
        s.calls += 1
        call = ToolCall(name, args, id=f"call_{uuid.uuid4().hex[:12]}")
        try:
            obs, reward, terminated, truncated, info = await s.env.astep(
                Message("assistant", "", tool_calls=[call])
            )
        except Exception as e:  # noqa: BLE001 - the env failed, not the agent: fails the episode
            s.error = f"env tool {name!r}: {error_text(e)}"
            raise HTTPError(500, s.error, "server_error") from e
        text = "\n".join(m.content for m in obs.messages if m.content)
        if len(text) > OUTPUT_CHARS:
            text = text[:OUTPUT_CHARS] + f"\n[... cut at {OUTPUT_CHARS} chars]"
        done = bool(terminated or truncated)
        if done:
            s.ended = (reward, {k: v for k, v in info.items() if k != "tool_results"})
        return {"output": text, "done": done}
