"""Shared fixtures. A tiny model is built once per session into a cache shared by all tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


@pytest.fixture(scope="session")
def agentrl_cache() -> Path:
    """Where tiny models are built once and shared by all tests."""
    return CACHE


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from agentrl.models.tiny import build_tiny

    return build_tiny("qwen2", str(CACHE))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # "No tests collected" must fail loudly, never pass as green.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
