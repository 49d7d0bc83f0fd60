"""Rewards for generated code: run a candidate against unit tests inside the sandbox.

API (used by the code envs):

- ``score_asserts(code, tests, entry_point=None, ...) -> CodeReward``: ``tests`` is either a
  list of assert statements (each runs as its own sandboxed program ``code + assert``; one
  test per statement) or a HumanEval-style test source defining ``check(candidate)`` (one
  test, ``check(<entry_point>)`` is appended; ``entry_point`` required).
- ``score_io(code, cases, ...) -> CodeReward``: ``cases`` is a list of ``{"input": str,
  "output": str}``; the program reads stdin and its stdout must match ``output`` (compared
  line by line with trailing whitespace ignored, unless ``exact=True``).
- ``ascore_asserts`` / ``ascore_io``: the same, awaitable (rollout workers).

Common keywords: ``mode="fraction"`` (reward = passed / total) or ``"all"`` (1.0 only when
every test passes), ``timeout_s`` per test, ``memory_mb``, ``language`` (io only),
``backend`` (name or instance, default ``local``) and ``concurrency`` (tests run in parallel).
The result carries per-test outcomes (status, pass/fail, a short detail) for logging.

Who decides a test passed: for asserts, only the sandbox's judge (``_judge.py``). The tests
run in a process the candidate never touches; the candidate runs in a fresh interpreter beside
it and its functions are reached through calls that return plain data, so an object that
equals everything, a patched ``abs`` or a look at the tests' expected values (they never enter
the candidate's memory) does not pass a test. The judge reports the run's secret nonce only
after the last test (``ExecResult.verified``); an exit code of 0, output on stdout, or an early
``sys.exit`` never count. For I/O cases the program's stdout must match and it must exit with
status 0 (it may call ``sys.exit(0)`` after printing); the expected output never enters the
sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Literal

from . import run_many
from .base import ExecRequest, ExecResult, Language, SandboxBackend, Status

Mode = Literal["fraction", "all"]
DETAIL_CHARS = 400


@dataclasses.dataclass
class TestOutcome:
    name: str
    passed: bool
    status: Status
    detail: str = ""


@dataclasses.dataclass
class CodeReward:
    reward: float
    passed: int
    total: int
    tests: list[TestOutcome]

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def _check_mode(mode: str) -> None:
    if mode not in ("fraction", "all"):
        raise ValueError(f"mode must be 'fraction' or 'all', got {mode!r}")


def _reward(outcomes: list[TestOutcome], mode: Mode) -> CodeReward:
    passed = sum(o.passed for o in outcomes)
    total = len(outcomes)
    if mode == "all":
        value = 1.0 if total and passed == total else 0.0
    else:
        value = passed / total if total else 0.0
    return CodeReward(value, passed, total, outcomes)


def _assert_requests(
    code: str,
    tests: str | Sequence[str],
    entry_point: str | None,
    support: str,
    timeout_s: float,
    memory_mb: int,
) -> tuple[list[str], list[ExecRequest]]:
    if isinstance(tests, str):
        if not entry_point:
            raise ValueError("a check(candidate) test source needs entry_point")
        names, checks = ["check"], [f"{tests}\n\ncheck({entry_point})\n"]
    else:
        names, checks = list(tests), [f"{t}\n" for t in tests]
    # The entry point always comes from the candidate, even where `support` (a HumanEval
    # prompt) defines a stub of it or it is named like a builtin or a stdlib module; other
    # names the tests do not define are resolved by the judge (builtins, stdlib modules) or,
    # failing that, taken from the candidate.
    remote = (entry_point,) if entry_point else ()
    kw = {"timeout_s": timeout_s, "memory_mb": memory_mb, "support": support, "remote": remote}
    return names, [ExecRequest(code, check=c, **kw) for c in checks]  # type: ignore[arg-type]


def _assert_outcome(name: str, res: ExecResult) -> TestOutcome:
    passed = res.verified is True
    status: Status = res.status if (passed or res.status != "ok") else "error"
    detail = "" if passed else (res.stderr.strip().splitlines() or [res.status])[-1]
    if not passed and res.status == "ok" and not res.stderr.strip():
        detail = "the program ended before the tests finished"
    return TestOutcome(name, passed, "ok" if passed else status, detail[:DETAIL_CHARS])


def _normalize(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return lines


def _io_outcome(i: int, case: dict, res: ExecResult, exact: bool) -> TestOutcome:
    want, got = str(case["output"]), res.stdout
    same = got == want if exact else _normalize(got) == _normalize(want)
    passed = res.ok and same
    detail = ""
    if not res.ok:
        detail = (res.stderr.strip().splitlines() or [res.status])[-1]
    elif not same:
        detail = f"expected {want[:150]!r}, got {got[:150]!r}"
    return TestOutcome(f"case{i}", passed, res.status, detail[:DETAIL_CHARS])


def score_asserts(
    code: str,
    tests: str | Sequence[str],
    entry_point: str | None = None,
    mode: Mode = "fraction",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    backend: str | SandboxBackend = "local",
    concurrency: int = 4,
    support: str = "",
) -> CodeReward:
    """Score Python ``code`` against assert statements or a ``check(candidate)`` function;
    ``support``: trusted code the tests may use (a HumanEval prompt's helpers)."""
    _check_mode(mode)
    names, reqs = _assert_requests(code, tests, entry_point, support, timeout_s, memory_mb)
    results = run_many(reqs, backend=backend, concurrency=concurrency)
    return _reward([_assert_outcome(n, r) for n, r in zip(names, results, strict=True)], mode)


def _io_requests(
    code: str, cases: Sequence[dict], language: Language, timeout_s: float, memory_mb: int
) -> list[ExecRequest]:
    return [
        ExecRequest(
            code, language, str(c.get("input", "")), timeout_s=timeout_s, memory_mb=memory_mb
        )
        for c in cases
    ]


def score_io(
    code: str,
    cases: Sequence[dict],
    mode: Mode = "fraction",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    language: Language = "python",
    exact: bool = False,
    backend: str | SandboxBackend = "local",
    concurrency: int = 4,
) -> CodeReward:
    """Score a stdin/stdout program against ``[{"input": ..., "output": ...}]`` cases."""
    _check_mode(mode)
    reqs = _io_requests(code, cases, language, timeout_s, memory_mb)
    results = run_many(reqs, backend=backend, concurrency=concurrency)
    return _reward(
        [_io_outcome(i, c, r, exact) for i, (c, r) in enumerate(zip(cases, results, strict=True))],
        mode,
    )


async def ascore_asserts(code: str, tests: str | Sequence[str], **kwargs) -> CodeReward:
    return await asyncio.to_thread(score_asserts, code, tests, **kwargs)


async def ascore_io(code: str, cases: Sequence[dict], **kwargs) -> CodeReward:
    return await asyncio.to_thread(score_io, code, cases, **kwargs)
