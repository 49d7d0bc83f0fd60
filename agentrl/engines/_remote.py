"""Plumbing shared by the vLLM and SGLang adapters: the engine's own event loop, weights as
files, HTTP, and `HTTPServerEngine`, the common half of their server modes.

Why an engine-owned loop (`EngineLoop`): vLLM's `AsyncLLM` and an `httpx.AsyncClient` bind
to the event loop they first run on (AsyncLLM's output handler task, httpx's pooled
connections). agentrl calls engines from several loops: the trainer syncs weights from plain
sync code before the first rollout, the rollout runner has its own loop, tests have one per
test. Run on a loop that later closed, those objects hang or fail. So every backend object
lives on one private loop in a daemon thread; `generate` awaits it from whatever loop the
caller runs, and the ABC's sync admin methods (`update_weights`, `sleep`, `wake`) block on it
with a timeout. A request that arrives while an admin call is pending waits for it, so no
request is scheduled against half-loaded weights.

Weights cross into backend processes as a safetensors file, never as tensors: vLLM's engine
core is another process and tensors sent through `collective_rpc` arrive there as nested
lists. Not as one safetensors blob through `collective_rpc` either: vLLM serialises and
copies the blob on its way to the worker, and for SmolLM2-135M in float32 (0.54 GB) on this
project's 2-core CPU an update took 5.8-9.0 s that way against 0.88-1.05 s through a file in
/dev/shm (`weights_scratch_dir`; benchmarks/vllm_weight_sync_cpu.py). Tensors that share memory (tied embeddings:
`lm_head.weight` is `embed_tokens.weight`) are written once per name, since safetensors
refuses shared storage.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from agentrl.engines.base import Engine, EngineError, GenerateResult, error_result


class EngineLoop:
    """A private event loop on a daemon thread that owns an engine's backend objects."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._admin_lock: asyncio.Lock | None = None
        self._admin_pending = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _check_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise EngineError("engine admin call from the engine's own loop thread")

    def run(self, make: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
        """Run `make()` on the loop from sync code (any thread but the loop's); raise
        EngineError naming `what` on failure or after `timeout_s`."""
        self._check_thread()
        if self.loop.is_closed():
            raise EngineError(f"{what}: the engine is closed")
        fut = asyncio.run_coroutine_threadsafe(_as_coro(make), self.loop)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise EngineError(f"{what} timed out after {timeout_s}s") from None
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    def admin(self, make: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
        """`run`, serialised with other admin calls; requests wait while one is pending."""

        async def gated() -> Any:
            if self._admin_lock is None:
                self._admin_lock = asyncio.Lock()
            self._admin_pending += 1
            self._idle.clear()
            try:
                async with self._admin_lock:
                    return await make()
            finally:
                self._admin_pending -= 1
                if not self._admin_pending:
                    self._idle.set()

        return self.run(gated, timeout_s, what)

    async def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await `coro` on the engine loop from any other loop (cancellation propagates)."""
        if self.loop.is_closed():
            coro.close()
            raise EngineError("the engine is closed")

        async def after_admin() -> Any:
            await self._idle.wait()
            return await coro

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(after_admin(), self.loop))

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


async def _as_coro(make: Callable[[], Awaitable[Any]]) -> Any:
    return await make()


def cpu_tensors(named_tensors: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Detached contiguous CPU tensors, each with its own storage (a tied or otherwise
    shared tensor is cloned), ready for safetensors."""
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for name, tensor in named_tensors:
        t = tensor.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out


SCRATCH_PREFIX = "agentrl-weights-"


def weights_scratch_dir(nbytes: int) -> str:
    """A new private directory for one weights file of about `nbytes` that an engine on this
    machine reads: in /dev/shm (memory, no disk write) when it has room for the file twice
    over (a container's /dev/shm is often 64 MB), else the system's temporary directory."""
    shm = "/dev/shm"
    parent = None
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        _remove_orphans(shm)
        if shutil.disk_usage(shm).free >= 2 * nbytes:
            parent = shm
    return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=parent)


def weights_file_name() -> str:
    """A weights file name no other sync uses: two runs may share one `weight_sync_dir` (one
    path set for every run on a node), and a fixed or per-run numbered name would let one
    run's workers load the other's weights, or delete them before they are read."""
    return f"{SCRATCH_PREFIX}{uuid.uuid4().hex}.safetensors"


def _remove_orphans(parent: str) -> None:
    """Delete scratch directories whose process is gone (killed mid-update): memory in
    /dev/shm is not freed until someone deletes the file."""
    for entry in os.scandir(parent):
        pid = entry.name[len(SCRATCH_PREFIX) :].split("-")[0]
        if not (entry.name.startswith(SCRATCH_PREFIX) and pid.isdigit() and entry.is_dir()):
            continue  # weights files (`weights_file_name`) are never directories
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, OverflowError):
            shutil.rmtree(entry.path, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def save_weights(named_tensors: Iterable[tuple[str, Any]], directory: str, name: str) -> str:
    """Write tensors as one safetensors file (for servers that load weights from disk)."""
    from safetensors.torch import save_file

    Path(directory).mkdir(parents=True, exist_ok=True)
    path = os.path.join(directory, name)
    save_file(cpu_tensors(named_tensors), path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


class HTTPServerEngine(Engine):
    """What the vLLM and SGLang server modes share: the HTTP client on the engine loop, the
    admin calls, the generate round trip and weight files in `weight_sync_dir`. Subclasses
    say which endpoints and bodies. `request_timeout_s` bounds one generate round trip (a
    hung or killed server ends the request with an error); `timeout_s` bounds admin calls."""

    def __init__(
        self,
        base_url: str,
        *,
        weight_sync_dir: str = "",
        timeout_s: float = 600.0,
        request_timeout_s: float | None = None,
        client: Any = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.weight_sync_dir = weight_sync_dir
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s or timeout_s
        self._loop = EngineLoop(f"agentrl-{type(self).__name__}")
        self.client = client or self._loop.run(self._make_client, 60, "http client")

    async def _make_client(self) -> Any:
        """No cap on connections: `rollout.concurrency` bounds the requests, and httpx's
        default of 100 would queue the rest in the client, unseen by the server. Idle
        connections are dropped after 2 s, before the server's own keep-alive timeout (5 s in
        vLLM and uvicorn), so that a request rarely goes out on one the server is closing."""
        import httpx

        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0
        )
        return httpx.AsyncClient(timeout=self.timeout_s, limits=limits)

    async def _send(self, path: str, payload: dict[str, Any] | None = None, **kw: Any) -> Any:
        """POST; once more if a kept-alive connection turns out closed by the server
        ("Server disconnected without sending a response": the request never ran there).
        The `httpx.Response`, whatever its status."""
        import httpx

        url = f"{self.base_url}{path}"
        try:
            return await self.client.post(url, json=payload, **kw)
        except httpx.RemoteProtocolError as exc:
            if "without sending a response" not in str(exc):  # it may have run: no resend
                raise
            return await self.client.post(url, json=payload, **kw)

    async def _post(self, path: str, payload: dict[str, Any] | None = None, **kw: Any) -> Any:
        """POST and decode JSON; HTTP errors become EngineError with the server's message."""
        resp = await self._send(path, payload, **kw)
        if resp.status_code >= 400:
            raise EngineError(f"{self.base_url}{path}: HTTP {resp.status_code}: {resp.text[:500]}")
        return resp.json() if resp.content else None

    async def _generate_via(
        self,
        path: str,
        build: Callable[[], dict[str, Any]],
        parse: Callable[[Any], GenerateResult],
    ) -> GenerateResult:
        """One generate round trip on the engine loop. `build` errors (invalid requests)
        propagate; transport, timeout and parse failures become error results."""
        payload = build()
        return await self._loop.call(self._round_trip(path, payload, parse))

    async def _round_trip(
        self, path: str, payload: dict[str, Any], parse: Callable[[Any], GenerateResult]
    ) -> GenerateResult:
        """POST `payload` and parse the answer, on the engine loop; failures become error
        results."""
        try:
            # A total deadline: httpx's timeout bounds each socket operation, not the whole
            # round trip (a server that trickles bytes would never time out).
            body = await asyncio.wait_for(
                self._post(path, payload, timeout=self.request_timeout_s),
                self.request_timeout_s,
            )
            return parse(body)
        except Exception as exc:
            return error_result(exc)

    def _admin_post(self, path: str, payload: dict[str, Any] | None = None, **kw: Any) -> Any:
        """One admin POST, blocking until the server answers (or `timeout_s`)."""
        return self._loop.admin(lambda: self._post(path, payload, **kw), self.timeout_s, path)

    def _save_weights(self, named_tensors: Iterable[tuple[str, Any]], name: str = "") -> str:
        """Write a weights file into `weight_sync_dir`; its path. Without `name`, a new
        name per sync (`weights_file_name`)."""
        if not self.weight_sync_dir:
            raise EngineError("server-mode weight sync needs engine.extra.weight_sync_dir")
        return save_weights(named_tensors, self.weight_sync_dir, name or weights_file_name())

    async def close(self) -> None:
        if self._loop.loop.is_closed():
            return
        await self._loop.call(self.client.aclose())
        self._loop.stop()
