"""Shared fixtures. A tiny model is built once per session into a cache shared by all tests."""

from __future__ import annotations

import os
import signal
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


# Host programs copied, with the libraries they load, into `userland_image`.
_USERLAND = ("bash", "cat", "ls", "head", "tail", "id", "env", "grep", "sed", "touch", "mkdir")
_USERLAND += ("rm", "chmod", "cp", "wc", "sleep", "tr", "dd", "stat", "readlink", "find")


@pytest.fixture(scope="session")
def userland_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local docker image with a userland of its own (no registry: ``FROM scratch`` and a
    few host programs with their libraries, no Python), like the images real Harbor tasks
    build; skips when no docker engine answers."""
    import shutil
    import subprocess

    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - no engine: the docker tests skip
        pytest.skip(f"docker unavailable: {exc}")
    tag = "agentrl-test-userland:1"
    root = tmp_path_factory.mktemp("userland") / "rootfs"
    for name in ("bin", "lib", "lib64", "sbin"):
        os.makedirs(root / "usr" / name)
        os.symlink(f"usr/{name}", root / name)
    for name in ("etc", "tmp", "proc", "dev", "sys"):
        os.makedirs(root / name)
    os.chmod(root / "tmp", 0o1777)
    for prog in _USERLAND:
        path = shutil.which(prog, path="/usr/bin:/bin")
        assert path, prog
        libs = subprocess.run(["ldd", path], capture_output=True, text=True).stdout.split()
        for src in [path, *(w for w in libs if w.startswith("/"))]:
            rel = src.lstrip("/")  # at the path asked for; /lib is /usr/lib in the image
            dst = root / (rel if rel.startswith("usr/") else f"usr/{rel}")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            shutil.copymode(src, dst)
    (root / "usr" / "bin" / "sh").symlink_to("bash")
    (root.parent / "Dockerfile").write_text("FROM scratch\nCOPY rootfs/ /\n")
    try:
        client.images.build(path=str(root.parent), tag=tag, rm=True, pull=False)
    finally:
        client.close()
    return tag


# Files a test left in the checkout. Run folders first (`trainer.out_dir` defaults to
# runs/{env}, relative to the working folder): a test writes its runs under tmp_path; one that
# does not fails the session, named by the folders it left. Then anything else new in the
# tree that git does not track (ignored or not), caches of the tools aside: the suite leaves
# `git status --ignored` as it found it.
ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"
_runs_before: set[str] = set()
_tree_before: set[str] | None = None
_TOOL_CACHES = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}

# Hypothesis keeps its example database and caches in ./.hypothesis unless told otherwise.
try:
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:  # the test extra is not installed: nothing to redirect
    pass
else:
    set_hypothesis_home_dir(CACHE / "hypothesis")


def _untracked() -> set[str] | None:
    """Paths in the checkout that git does not track (ignored ones too, folders collapsed),
    tool caches left out; None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=normal", "-z"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    paths = {e[3:] for e in out.stdout.split("\0") if e[:2] in ("??", "!!")}
    return {p for p in paths if not (_TOOL_CACHES & set(p.rstrip("/").split("/")))}


_typecheck_modules: list = []


def pytest_sessionstart(session: pytest.Session) -> None:
    global _tree_before
    # A suite a script started with `&` inherits SIGINT ignored, and so would every CLI run
    # it starts; the Ctrl-C tests need Python's own handler (the case of an ignored SIGINT
    # has tests of its own that set it).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if RUNS.is_dir():
        _runs_before.update(p.name for p in RUNS.iterdir())
    _tree_before = _untracked()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items) -> None:
    """The mypy test (tests/core/test_typecheck.py) goes last and its mypy starts at once, in
    the background: on CI's two cores its ~2 cold minutes overlap the rest of the suite."""
    typecheck = [i for i in items if i.nodeid.startswith("tests/core/test_typecheck.py::")]
    if not typecheck or config.option.collectonly:
        return
    items[:] = [i for i in items if i not in typecheck] + typecheck
    if len(items) > len(typecheck):  # alone, the test starts it itself
        typecheck[0].module.start_in_background()
        _typecheck_modules.append(typecheck[0].module)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for module in _typecheck_modules:
        module.stop_background()
    # "No tests collected" must fail loudly, never pass as green.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    left = sorted({p.name for p in RUNS.iterdir()} - _runs_before) if RUNS.is_dir() else []
    if left:
        print(f"\ntests left run folders in the checkout: {RUNS}/{{{','.join(left)}}}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    after = _untracked() if _tree_before is not None else None
    new = sorted(p for p in (after or set()) - (_tree_before or set()) if p != "runs/")
    if new:
        print(f"\ntests left files in the checkout ({ROOT}): {', '.join(new)}")
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
