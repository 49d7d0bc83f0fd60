"""Backends for the sandbox tests: ``local`` always (skips without root/bwrap), ``docker``
when an engine and the base image exist, else a clear skip.

When docker is not usable and we are root, the engine is started the way CI does it, by
running ``scripts/setup-sandbox.sh`` once (it starts dockerd and builds the base image), and
checked again; the skip reason then says why it still is not usable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agentrl.sandboxes import get_backend

_BACKENDS: dict[str, object] = {}


def local_reason() -> str | None:
    if os.geteuid() != 0:
        return "local sandbox needs root"
    if shutil.which("bwrap") is None:
        return "bubblewrap not installed (run scripts/setup-sandbox.sh)"
    return None


SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-sandbox.sh"
_SETUP_TRIED: list[str] = []


def docker_reason() -> str | None:
    from agentrl.sandboxes.docker_backend import docker_status

    ok, why = docker_status()
    if ok or os.geteuid() != 0 or not SETUP.exists():
        return None if ok else why
    if not _SETUP_TRIED:  # start dockerd as CI does, once per session
        try:
            out = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=240)
            _SETUP_TRIED.append(out.stdout[-300:])
        except subprocess.TimeoutExpired:
            _SETUP_TRIED.append("scripts/setup-sandbox.sh timed out")
        ok, why = docker_status()
    return None if ok else f"{why} (after scripts/setup-sandbox.sh: {_SETUP_TRIED[0].strip()})"


# The modules run in ``image_userland`` mode too: it moves the host's mounts and starts the
# runner through the host's loader, so what a program can see, reach and run is what changes;
# the judge's protocol (judge, reward hacks, init forgery: ~80 s more) is the same runner.
USERLAND_MODULES = {"test_basics", "test_isolation", "test_hidden_data", "test_adversarial"}
USERLAND_MODULES |= {"test_seccomp", "test_docker_userland"}


def pytest_collection_modifyitems(config, items):
    """Deselect ``docker-userland`` cases outside `USERLAND_MODULES` (the suite's time)."""
    keep, drop = [], []
    for item in items:
        module = item.path.stem if item.path.parent.name == "sandboxes" else ""
        userland = "docker-userland" in item.nodeid and module and module not in USERLAND_MODULES
        (drop if userland else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(
    scope="session",
    params=[
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("docker-userland", marks=pytest.mark.docker),
    ],
)
def backend(request):
    """``docker-userland``: docker's ``image_userland`` mode on an image with its own
    ``/usr`` (``userland_image``), in the modules about what that mode changes (the mounts,
    the loader): `USERLAND_MODULES`."""
    name = request.param
    reason = local_reason() if name == "local" else docker_reason()
    if reason:
        pytest.skip(f"{name} backend unavailable: {reason}")
    if name not in _BACKENDS:
        if name == "local":
            _BACKENDS[name] = get_backend(name, pids=64)
        elif name == "docker":
            _BACKENDS[name] = get_backend(name)
        else:
            image = request.getfixturevalue("userland_image")
            _BACKENDS[name] = get_backend("docker", image=image, image_userland=True)
    yield _BACKENDS[name]


@pytest.fixture(scope="session")
def local():
    reason = local_reason()
    if reason:
        pytest.skip(reason)
    backend = get_backend("local", pool_size=2)
    yield backend
    backend.close()
