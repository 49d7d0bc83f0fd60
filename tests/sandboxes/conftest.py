"""Backends for the sandbox tests: ``local`` always (skips without root/bwrap), ``docker``
when an engine and the base image exist (``scripts/setup-sandbox.sh``), else a clear skip."""

from __future__ import annotations

import os
import shutil

import pytest
from agentrl.sandboxes import get_backend

_BACKENDS: dict[str, object] = {}


def local_reason() -> str | None:
    if os.geteuid() != 0:
        return "local sandbox needs root"
    if shutil.which("bwrap") is None:
        return "bubblewrap not installed (run scripts/setup-sandbox.sh)"
    return None


def docker_reason() -> str | None:
    from agentrl.sandboxes.docker_backend import docker_status

    ok, why = docker_status()
    return None if ok else why


@pytest.fixture(scope="session", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request):
    name = request.param
    reason = local_reason() if name == "local" else docker_reason()
    if reason:
        pytest.skip(f"{name} backend unavailable: {reason}")
    if name not in _BACKENDS:
        _BACKENDS[name] = get_backend(name, pids=64) if name == "local" else get_backend(name)
    yield _BACKENDS[name]


@pytest.fixture(scope="session")
def local():
    reason = local_reason()
    if reason:
        pytest.skip(reason)
    backend = get_backend("local", pool_size=2)
    yield backend
    backend.close()
