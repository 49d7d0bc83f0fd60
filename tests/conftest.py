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


# Run folders a test left in the checkout (`trainer.out_dir` defaults to runs/{env}, relative
# to the working folder): a test writes its runs under tmp_path; one that does not fails the
# session, named by the folders it left.
RUNS = Path(__file__).resolve().parent.parent / "runs"
_runs_before: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    if RUNS.is_dir():
        _runs_before.update(p.name for p in RUNS.iterdir())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # "No tests collected" must fail loudly, never pass as green.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    left = sorted({p.name for p in RUNS.iterdir()} - _runs_before) if RUNS.is_dir() else []
    if left:
        print(f"\ntests left run folders in the checkout: {RUNS}/{{{','.join(left)}}}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """End every run with its skips counted by reason, so a skip that should not happen
    (a missing extra, a service that is down) is seen, not buried in the dots."""
    import collections

    reasons: collections.Counter[str] = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section(f"skipped by reason ({sum(reasons.values())})", sep="-")
    for reason, n in reasons.most_common():
        terminalreporter.line(f"{n:4d}  {reason}")
