"""Sandboxes for untrusted code: ``run``/``run_many`` an :class:`ExecRequest` on a backend.

Backends (``get_backend(name)``): ``local`` (default; bubblewrap namespaces, cgroups, rlimits,
warm zygote pool; see ``local.py`` for the threat model) and ``docker`` (a container per run).
Every backend returns an :class:`ExecResult` and never raises for what the code does.

>>> from agentrl.sandboxes import ExecRequest, run_many
>>> [r.stdout for r in run_many([ExecRequest("print(6*7)")], concurrency=2)]
['42\\n']
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import (
    STATUSES,
    ExecRequest,
    ExecResult,
    SandboxBackend,
    Status,
    available_backends,
    get_backend,
    register_backend,
)
from .local import LocalBackend


def _docker(**kwargs: Any) -> SandboxBackend:
    from .docker_backend import DockerBackend

    return DockerBackend(**kwargs)


register_backend("local", LocalBackend)
register_backend("docker", _docker)


def run(request: ExecRequest, backend: str | SandboxBackend = "local") -> ExecResult:
    """Run one request and wait for its result."""
    return get_backend(backend).run(request)


async def arun(request: ExecRequest, backend: str | SandboxBackend = "local") -> ExecResult:
    return await get_backend(backend).arun(request)


def run_many(
    requests: Iterable[ExecRequest],
    backend: str | SandboxBackend = "local",
    concurrency: int = 4,
) -> list[ExecResult]:
    """Run a batch with at most ``concurrency`` sandboxes alive at once; results keep order."""
    impl = get_backend(backend)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(impl.run, requests))


async def arun_many(
    requests: Iterable[ExecRequest],
    backend: str | SandboxBackend = "local",
    concurrency: int = 4,
) -> list[ExecResult]:
    """Async :func:`run_many` for rollout workers; never blocks the event loop."""
    impl = get_backend(backend)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(req: ExecRequest) -> ExecResult:
        async with gate:
            return await impl.arun(req)

    return await asyncio.gather(*(one(r) for r in requests))


__all__ = [
    "STATUSES",
    "ExecRequest",
    "ExecResult",
    "LocalBackend",
    "SandboxBackend",
    "Status",
    "arun",
    "arun_many",
    "available_backends",
    "get_backend",
    "register_backend",
    "run",
    "run_many",
]
