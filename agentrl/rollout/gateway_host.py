"""The recording gateway (`agentrl serve`'s app) hosted inside the trainer, on the training engine.

Why in-process: a harness rollout needs the agent's calls recorded token-exactly by the very
engine the trainer syncs weights into, and the recorded segments read back without a file or
an HTTP round trip. The app runs under uvicorn on the rollout runner's own event loop (where
the engine's batching task lives), bound to 127.0.0.1 on an ephemeral port; the trainer reads
the sessions straight from its recorder and never hands out the admin token.

Sessions by URL: `base_url(root, session)` is the one function that says where an episode's
agent is pointed. `SessionPaths` maps `/s/{session}/...` onto the app's routes with the
session in `X-Session-Id` (replacing any the client sent), so an unchanged agent that only
takes a base URL lands in its episode's session.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine
from agentrl.rollout.env_tools import EnvTools

SESSION_PREFIX = "/s/"
_SESSION_HEADERS = (b"x-session-id", b"x-agentrl-session")


def base_url(root: str, session: str) -> str:
    """The OpenAI base URL of `session` on the gateway at `root` (`http://127.0.0.1:PORT`)."""
    return f"{root}{SESSION_PREFIX}{session}/v1"


def anthropic_base_url(root: str, session: str) -> str:
    """Anthropic's SDKs append `/v1/messages` to their base URL themselves."""
    return f"{root}{SESSION_PREFIX}{session}"


class SessionPaths:
    """ASGI middleware: `/s/{session}/rest` -> `/rest` with `X-Session-Id: session`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope.get("type") == "http" and path.startswith(SESSION_PREFIX):
            session, _, rest = path[len(SESSION_PREFIX) :].partition("/")
            headers = [(k, v) for k, v in scope.get("headers", []) if k not in _SESSION_HEADERS]
            headers.append((b"x-session-id", session.encode()))
            scope = dict(scope, path="/" + rest, raw_path=("/" + rest).encode(), headers=headers)
        await self.app(scope, receive, send)


class GatewayHost:
    """`create_app` over `engine`, served by uvicorn on the running loop (`start`/`stop`)."""

    def __init__(
        self,
        engine: Engine,
        chat: ChatFormat,
        sampling: SamplingConfig,
        *,
        tokenizer_name: str | None = None,
        request_timeout_s: float = 600.0,
        force_first_tool_call: str = "",
    ) -> None:
        import uvicorn

        from agentrl.serve import create_app
        from agentrl.serve.limits import KEEP_ALIVE_S

        app = create_app(
            engine,
            chat,
            sampling=sampling,
            tokenizer_name=tokenizer_name,
            request_timeout_s=request_timeout_s,
            force_first_tool_call=force_first_tool_call,
        )
        self.recorder = app.state.recorder
        self.env_tools = EnvTools(app.state.limits)  # the open episodes' env tools
        self.env_tools.mount(app)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.root = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            SessionPaths(app),
            interface="asgi3",
            lifespan="off",
            log_level="warning",
            log_config=None,  # leave the trainer's logging as it is
            timeout_graceful_shutdown=5,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self.server = uvicorn.Server(config)
        self.task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float = 60.0) -> None:
        """Serve from now on (on the calling loop); returns once the socket accepts."""
        self.task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self.server.started:
            if self.task.done():
                self.task.result()  # raises why it stopped
                raise RuntimeError("the in-process gateway stopped before it started")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the in-process gateway did not start in {timeout_s}s")
            await asyncio.sleep(0.01)

    async def stop(self, timeout_s: float = 30.0) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        try:
            await asyncio.wait_for(self.task, timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self.task.cancel()
        finally:
            self.task = None
            self.sock.close()
