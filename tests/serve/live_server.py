"""A live uvicorn server on 127.0.0.1 (loopback only) in a thread, for tests.

`admin(url)` gives the headers of the served app's admin endpoints (its per-run token);
`segments(url, session)` reads what a session recorded, each segment validated."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from agentrl.types import Trajectory

_TOKENS: dict[str, str] = {}


def admin(url: str) -> dict[str, str]:
    """The `Authorization` header for reading, rewarding and clearing at `url`."""
    return {"Authorization": f"Bearer {_TOKENS[url]}"}


def segments(url: str, session: str) -> list[Trajectory]:
    """The session's recorded segments (`/v1/trajectories`), each `validate()`d."""
    data = httpx.get(
        f"{url}/v1/trajectories", params={"session": session}, headers=admin(url), timeout=30
    ).json()["data"]
    out = [Trajectory.from_dict(d) for d in data]
    for t in out:
        t.validate()
    return out


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Run `app` on a free loopback port; yields the base URL, shuts down cleanly."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    _TOKENS[url] = app.state.admin_token
    try:
        yield url
    finally:
        _TOKENS.pop(url, None)
        server.should_exit = True
        thread.join(timeout=10)
