"""SWE tasks: a real package's source distribution, one injected bug, the tests it breaks.

A task is kept only if the package's own suite goes from green to red under the mutation:
``fail_tests`` (the tests the bug breaks) become the hidden reward tests, and every other test
that passed before must still pass after the fix. Building runs the package's test suite on
the host (the package and our mutations are trusted; model-written code is only ever run in a
sandbox, see ``workspace.py``).

Why source distributions: PyPI sdists of many small pure-Python packages ship their test
suites, so real code with real tests is available offline. ``scripts/build-swe-tasks.py``
makes a task set reproducibly from a seed; a small set (``data/tasks.jsonl`` with the sdists
beside it) ships with agentrl.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from agentrl.rows import Row, RowError, read_dataset

from .mutate import KINDS, Mutation, sites

DATA = Path(__file__).parent / "data"
PLUGIN, PLUGIN_FILE = "agentrl_swe_report", Path(__file__).parent / "_pytest_report.py"


@dataclasses.dataclass(frozen=True)
class Package:
    """Where the code and the tests of one repo are (paths relative to its top folder).

    ``archive`` is an sdist in ``data/`` whose top folder is ``root``; an empty archive means
    a generated repo (``tiny.py``)."""

    archive: str
    root: str
    source: tuple[str, ...]
    tests: tuple[str, ...]
    pythonpath: str = ""

    def is_test(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        under = any(path == t or path.startswith(t.rstrip("/") + "/") for t in self.tests)
        return under or name.startswith("test_") or name == "conftest.py"

    def is_source(self, path: str) -> bool:
        """May an agent's change to ``path`` count? Python files beside the package's source."""
        dirs = {s.rsplit("/", 1)[0] + "/" if "/" in s else "" for s in self.source}
        ok = path.endswith(".py") and not self.is_test(path)
        return ok and any(path.startswith(d) and (d or "/" not in path) for d in dirs)


PACKAGES = {
    "inflection": Package(
        "inflection-0.5.1.tar.gz",
        "inflection-0.5.1",
        ("inflection/__init__.py",),
        ("test_inflection.py",),
    ),
    "cachetools": Package(
        "cachetools-8.0.2.tar.gz",
        "cachetools-8.0.2",
        ("src/cachetools/__init__.py", "src/cachetools/keys.py", "src/cachetools/func.py"),
        ("tests",),
        "src",
    ),
    "minilib": Package("", "minilib", ("minilib/core.py", "minilib/text.py"), ("tests",)),
    "toolz": Package(
        "toolz-1.2.0.tar.gz",
        "toolz-1.2.0",
        ("toolz/itertoolz.py", "toolz/dicttoolz.py", "toolz/functoolz.py"),
        ("toolz/tests",),
    ),
}


@dataclasses.dataclass(frozen=True)
class SweTask:
    """One bug to fix. ``fail_tests`` are pytest node ids (hidden); ``pass_tests`` are the
    node ids that passed before the bug and must stay green (a set, never a count)."""

    id: str
    package: str
    mutation: Mutation
    fail_tests: tuple[str, ...]
    pass_tests: tuple[str, ...]

    @property
    def pass_count(self) -> int:
        return len(self.pass_tests)

    @property
    def spec(self) -> Package:
        return PACKAGES[self.package]

    def statement(self) -> str:
        m = self.mutation
        name = m.function.replace(".", "`.`")
        return (
            f"A bug was introduced in `{m.file}` in the `{self.package}` repository, in "
            f"`{name}`: {len(self.fail_tests)} test(s) of the project's suite now fail. The "
            "repository is checked out in the current directory. Find the bug and fix it in "
            "the source (the tests are fine; changes to test files are discarded, and a fix "
            "must not add imports or reflection such as getattr or dunder names). Use the "
            "tools to look around, edit files and run the visible tests, then call `submit`."
        )

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["fail_tests"] = list(self.fail_tests)
        d["pass_tests"] = list(self.pass_tests)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> SweTask:
        return cls(
            id=d["id"],
            package=d["package"],
            mutation=Mutation(**d["mutation"]),
            fail_tests=tuple(d["fail_tests"]),
            pass_tests=tuple(d["pass_tests"]),
        )


def load_tasks(path: str | Path | None = None) -> list[SweTask]:
    """Tasks from a JSONL file (default: the set shipped with agentrl), read by the one dataset
    reader (`agentrl.rows`): a bad line fails as `<file>: row <n>: column '<c>': <why>`."""
    tasks: list[SweTask] = []

    def read(row: Row) -> None:
        try:
            tasks.append(SweTask.from_dict(row.data))
        except KeyError as e:
            raise RowError(str(e.args[0]), "missing") from None
        except (TypeError, ValueError) as e:
            raise RowError(None, f"not a task: {e}") from None

    read_dataset(path or DATA / "tasks.jsonl", check=read)
    return tasks


@functools.lru_cache(maxsize=16)
def _tree(package: str, archives: str) -> MappingProxyType:
    pkg = PACKAGES[package]
    if not pkg.archive:
        from .tiny import FILES

        return MappingProxyType({p: t.encode() for p, t in FILES.items()})
    out: dict[str, bytes] = {}
    prefix = pkg.root + "/"
    with tarfile.open(Path(archives) / pkg.archive) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith(prefix) and ".egg-info/" not in m.name:
                f = tar.extractfile(m)
                assert f is not None
                out[m.name[len(prefix) :]] = f.read()
    return MappingProxyType(out)


def pristine(package: str, archives: Path = DATA) -> MappingProxyType:
    """The package's files before any bug, path -> bytes (read once per process)."""
    return _tree(package, str(archives))


def materialize(tree: Mapping[str, bytes], dest: Path) -> Path:
    for path, data in tree.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


def run_suite(root: Path, pkg: Package, timeout_s: float = 300.0) -> dict[str, str]:
    """Run the package's tests on the host: node id -> outcome (passed, failed, skipped)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        shutil.copy(PLUGIN_FILE, Path(tmp) / f"{PLUGIN}.py")
        paths = os.pathsep.join([str(root / pkg.pythonpath), tmp])
        env = dict(os.environ, PYTHONPATH=paths, PYTHONDONTWRITEBYTECODE="1")
        env["AGENTRL_SWE_REPORT"] = str(report)
        cmd = [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider"]
        cmd += ["-p", PLUGIN, *pkg.tests]
        subprocess.run(cmd, cwd=root, env=env, capture_output=True, timeout=timeout_s)
        return parse_report(report.read_text() if report.exists() else "")


def parse_report(text: str) -> dict[str, str]:
    """The plugin's JSON lines -> {node id: outcome}."""
    rows = (json.loads(line) for line in text.splitlines() if line.strip())
    return {r["id"]: r["outcome"] for r in rows}


def build(
    package: str, n: int, seed: int = 0, archives: Path = DATA, max_tries: int = 60
) -> list[SweTask]:
    """Up to ``n`` tasks for one package: mutants that break some, not all, passing tests."""
    pkg = PACKAGES[package]
    rng = random.Random(f"{package}:{seed}")
    with tempfile.TemporaryDirectory() as tmp:
        root = materialize(pristine(package, archives), Path(tmp) / "repo")
        green = {k for k, v in run_suite(root, pkg).items() if v == "passed"}
        if not green:
            raise RuntimeError(f"{package}: its test suite has no passing test here")
        by_kind: dict[str, list[Mutation]] = {k: [] for k in KINDS}
        for file in pkg.source:
            for m in sites(file, (root / file).read_text(encoding="utf-8")):
                by_kind[m.kind].append(m)
        for pool in by_kind.values():
            rng.shuffle(pool)
        tasks: list[SweTask] = []
        seen_funcs: set[tuple[str, str]] = set()
        for _ in range(max_tries):
            if len(tasks) >= n or not any(by_kind.values()):
                break
            kind = rng.choice([k for k, v in by_kind.items() if v])
            m = by_kind[kind].pop()
            if (m.file, m.function) in seen_funcs:
                continue  # one bug per function keeps the set diverse
            path = root / m.file
            original = path.read_text(encoding="utf-8")
            path.write_text(m.apply(original), encoding="utf-8")
            try:
                after = run_suite(root, pkg)
            except subprocess.TimeoutExpired:
                after = {}
            finally:
                path.write_text(original, encoding="utf-8")
            broken = sorted(t for t in green if after.get(t) != "passed")
            if not broken or len(broken) == len(green) or not after:
                continue  # equivalent mutant, or one that breaks everything (import error)
            seen_funcs.add((m.file, m.function))
            tid = f"{package}-{seed}-{len(tasks):03d}"
            tasks.append(
                SweTask(tid, package, m, tuple(broken), tuple(sorted(green - set(broken))))
            )
        return tasks
