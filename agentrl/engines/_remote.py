"""Plumbing shared by the vLLM and SGLang adapters: admin calls from sync code, HTTP, files,
and `HTTPServerEngine`, the common half of their server modes.

The `Engine` ABC's admin methods (`update_weights`, `sleep`, `wake`) are synchronous, while
vLLM's `AsyncLLM` and every HTTP client are asynchronous. `AdminCalls.run` bridges the two:
called with an event loop running in this thread it schedules the call as a task that the
next `generate()` awaits first (so no request ever sees half-updated weights); called from
plain sync code it runs the call to completion on the engine's home loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from agentrl.engines.base import Engine, EngineError, GenerateResult, error_result


class AdminCalls:
    """Runs async admin coroutines from the ABC's sync methods (see module docstring)."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        self.timeout_s = timeout_s
        self.home: asyncio.AbstractEventLoop | None = None
        self._pending: list[asyncio.Task[Any]] = []

    def bind(self) -> None:
        """Remember the loop requests run on (called by `generate`)."""
        self.home = asyncio.get_running_loop()

    def run(self, make: Callable[[], Awaitable[Any]]) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        home = self.home
        if running is not None and (home is None or running is home):
            prev = self._pending[-1] if self._pending else None
            self._pending.append(running.create_task(_after(prev, make)))
        elif running is not None:
            raise EngineError("admin call from a different running event loop")
        elif home is not None and home.is_running():
            asyncio.run_coroutine_threadsafe(_as_coro(make), home).result(self.timeout_s)
        elif home is not None and not home.is_closed():
            home.run_until_complete(asyncio.wait_for(_as_coro(make), self.timeout_s))
        else:
            asyncio.run(asyncio.wait_for(_as_coro(make), self.timeout_s))

    async def drain(self) -> None:
        """Await scheduled admin calls; a failed one raises here, once."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        gathered = asyncio.gather(*pending, return_exceptions=True)
        results = await asyncio.wait_for(gathered, self.timeout_s)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise EngineError(f"admin call failed: {errors[0]!r}") from errors[0]


async def _after(prev: asyncio.Task[Any] | None, make: Callable[[], Awaitable[Any]]) -> Any:
    """Admin calls run in the order they were made; a failure is reported by `drain`."""
    if prev is not None:
        with contextlib.suppress(Exception):
            await prev
    return await make()


async def _as_coro(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


async def post_json(
    client: Any, url: str, payload: dict[str, Any] | None = None, *, params: Any = None
) -> Any:
    """POST and decode JSON; HTTP errors become EngineError with the server's message."""
    resp = await client.post(url, json=payload, params=params)
    if resp.status_code >= 400:
        raise EngineError(f"{url}: HTTP {resp.status_code}: {resp.text[:500]}")
    return resp.json() if resp.content else None


def save_weights(named_tensors: Iterable[tuple[str, Any]], directory: str, name: str) -> str:
    """Write tensors as one safetensors file (for servers that load weights from disk)."""
    from safetensors.torch import save_file

    Path(directory).mkdir(parents=True, exist_ok=True)
    path = os.path.join(directory, name)
    tensors = {k: v.detach().contiguous().cpu() for k, v in named_tensors}
    save_file(tensors, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


class HTTPServerEngine(Engine):
    """What the vLLM and SGLang server modes share: the HTTP client, the admin-call queue,
    the generate round trip and weight files in `weight_sync_dir`. Subclasses say which
    endpoints and bodies; keeping the ordering (bind, drain pending admin calls, then build
    and post the request) in one place keeps the two servers' semantics from drifting."""

    def __init__(
        self,
        base_url: str,
        *,
        weight_sync_dir: str = "",
        timeout_s: float = 600.0,
        client: Any = None,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.weight_sync_dir = weight_sync_dir
        self.client = client or httpx.AsyncClient(timeout=timeout_s)
        self._admin = AdminCalls(timeout_s)
        self._version = itertools.count()

    async def _post(self, path: str, payload: dict[str, Any] | None = None, **kw: Any) -> Any:
        return await post_json(self.client, f"{self.base_url}{path}", payload, **kw)

    async def _generate_via(
        self,
        path: str,
        build: Callable[[], dict[str, Any]],
        parse: Callable[[Any], GenerateResult],
    ) -> GenerateResult:
        """One generate round trip. `build` runs after pending admin calls are drained (its
        EngineErrors propagate); transport and parse failures become error results."""
        self._admin.bind()
        await self._admin.drain()
        payload = build()
        try:
            return parse(await self._post(path, payload))
        except Exception as exc:
            return error_result(exc)

    def _admin_post(self, path: str, payload: dict[str, Any] | None = None, **kw: Any) -> None:
        """Schedule (or run, from sync code) one admin POST; see `AdminCalls.run`."""
        self._admin.run(lambda: self._post(path, payload, **kw))

    def _save_weights(self, named_tensors: Iterable[tuple[str, Any]], name: str = "") -> str:
        """Write a weights file into `weight_sync_dir`; its path. Without `name`, a new
        numbered name per sync (`agentrl-weights-N.safetensors`)."""
        if not self.weight_sync_dir:
            raise EngineError("server-mode weight sync needs engine.extra.weight_sync_dir")
        name = name or f"agentrl-weights-{next(self._version)}.safetensors"
        return save_weights(named_tensors, self.weight_sync_dir, name)

    async def close(self) -> None:
        await self._admin.drain()
        await self.client.aclose()
