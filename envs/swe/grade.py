"""The SWE reward: hidden tests on the agent's source changes, never on its test changes.

The rules, each closing a way to score without fixing the bug:

* **Hidden tests stay hidden.** The workspace an episode sees is the buggy repo with the test
  functions that the bug breaks removed where they are defined, base classes followed
  (``hidden.py``); they come back only at grading. ``collect`` checks that the visible suite
  collects none of them.
* **Tests are restored.** Grading runs in a fresh sandbox on the pristine test files and
  configuration plus only the agent's changes to Python files beside the package's own source
  (``Package.is_source``). Edited, deleted or added tests, ``conftest.py`` files, pytest
  configuration, ``.pth``/``sitecustomize`` files and new source files are all discarded.
* **Changes that cannot reflect.** The code under test runs in pytest's process, so whatever
  that process reports is only as honest as the code lets it be. A source change is accepted
  only inside the repair language of ``edits.py`` (an allowlist: the function's own values,
  operators, plain builtins; no imports, dunders, reflective builtins, new definitions); any
  other change scores 0 and says why. Caps on changed files and bytes apply before any parsing.
* **A pass is a finished pass.** A test passes only with a passed call report from a pytest
  session that finished normally (``_pytest_report.py``).
* **The rest stays green.** Every node id that passed before the bug (``SweTask.pass_tests``)
  must still pass; otherwise the reward is 0 whatever the hidden tests say. It is a set of
  ids, not a count: breaking one green test cannot be paid for by fixing another.

Reward: the fraction of hidden tests passing (``mode="fraction"``), or 1 only if all pass
(``mode="all"``). All grading runs in a sandbox of the env's backend.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
from collections.abc import Mapping
from types import MappingProxyType

from agentrl.sandboxes import ExecRequest, get_backend
from agentrl.sandboxes.base import SandboxBackend
from agentrl.sandboxes.workspace import command_env

from .edits import screen  # noqa: F401  (re-exported)
from .hidden import hidden_defs, strip
from .tasks import PLUGIN, PLUGIN_FILE, SweTask, parse_report, pristine

MAX_FILES = 16  # changed source files a repair may touch (an injected bug sits in one)
MAX_BYTES = 4 << 20  # their total size; both checked before anything is parsed

_GRADER = r"""
import json, os, subprocess
cfg = json.loads(CFG)
env = dict(os.environ, PYTHONPATH=os.pathsep.join(cfg["paths"]))
env["AGENTRL_SWE_COLLECT" if cfg["collect"] else "AGENTRL_SWE_REPORT"] = cfg["report"]
cmd = ["python", "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", cfg["plugin"]]
cmd += ["--collect-only"] if cfg["collect"] else []
try:
    subprocess.run(cmd + cfg["tests"], cwd="/work/repo", env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=cfg["timeout"])
except subprocess.TimeoutExpired:
    pass
text = open(cfg["report"]).read() if os.path.exists(cfg["report"]) else ""
print(cfg["mark"] + json.dumps(text))
"""


@dataclasses.dataclass
class Grade:
    """Outcome of grading one submission."""

    reward: float
    hidden_passed: int
    hidden_total: int
    others_passed: int
    others_needed: int
    discarded: list[str]
    tamper: list[str]  # why a change was refused (edits.screen)
    error: str = ""

    def summary(self) -> str:
        if self.error:
            return self.error
        parts = [f"hidden tests {self.hidden_passed}/{self.hidden_total}"]
        parts.append(f"other tests {self.others_passed}/{self.others_needed} still passing")
        if self.discarded:
            parts.append(f"discarded changes to {', '.join(sorted(self.discarded)[:5])}")
        return "; ".join(parts)


def mutated_tree(task: SweTask) -> dict[str, bytes]:
    """The repo with the bug, tests intact (what grading starts from)."""
    return dict(_mutated(task))


def workspace_tree(task: SweTask) -> dict[str, bytes]:
    """What the agent sees: the buggy repo with the hidden (failing) tests removed."""
    return dict(_workspace(task))


@functools.lru_cache(maxsize=64)
def _mutated(task: SweTask) -> MappingProxyType:
    tree = dict(pristine(task.package))
    m = task.mutation
    tree[m.file] = m.apply(tree[m.file].decode("utf-8")).encode("utf-8")
    return MappingProxyType(tree)


@functools.lru_cache(maxsize=64)
def _workspace(task: SweTask) -> MappingProxyType:
    tree = dict(_mutated(task))
    roots = tuple(dict.fromkeys(("", task.spec.pythonpath)))
    for file, paths in hidden_defs(tree, task.fail_tests, roots).items():
        tree[file] = strip(tree[file].decode("utf-8"), paths).encode("utf-8")
    return MappingProxyType(tree)


def graded_tree(task: SweTask, final: Mapping[str, bytes]) -> tuple[dict, list[str], list[str]]:
    """Buggy repo + the agent's source changes only; also (discarded paths, refusals)."""
    base, seen, orig = _mutated(task), _workspace(task), pristine(task.package)
    tree, discarded, refused = dict(base), [], []
    changed = [p for p in sorted(set(final) | set(seen)) if final.get(p) != seen.get(p)]
    source = [p for p in changed if task.spec.is_source(p)]
    size = sum(len(final.get(p) or b"") for p in source)
    if len(source) > MAX_FILES or size > MAX_BYTES:  # before parsing anything
        why = f"too many changes to grade: {len(source)} source files, {size} bytes"
        return tree, changed, [f"{why} (limits {MAX_FILES} files, {MAX_BYTES} bytes)"]
    for path in changed:
        new = final.get(path)
        if path not in source or path not in base:  # tests, config, new files
            discarded.append(path)
        elif new is None:
            tree.pop(path, None)
        else:
            tree[path] = new
            refused += screen(path, new, orig.get(path), base.get(path))
    return tree, discarded, refused


def grade(
    task: SweTask,
    final: Mapping[str, bytes],
    backend: str | SandboxBackend = "local",
    mode: str = "fraction",
    timeout_s: float = 120.0,
) -> Grade:
    """Run the full suite (pristine tests) on the agent's source changes, in a sandbox."""
    tree, discarded, tamper = graded_tree(task, final)
    n_hidden = len(task.fail_tests)
    if tamper:
        return Grade(
            0.0, 0, n_hidden, 0, task.pass_count, discarded, tamper, "refused: " + tamper[0]
        )
    outcomes = run_tests_in_sandbox(task, tree, backend, timeout_s)
    if outcomes is None:
        return Grade(
            0.0, 0, n_hidden, 0, task.pass_count, discarded, [], "the test run did not finish"
        )
    h_ok = sum(outcomes.get(t) == "passed" for t in set(task.fail_tests))
    broken = still_green(task, outcomes)
    reward = h_ok / n_hidden if mode == "fraction" else float(h_ok == n_hidden)
    if broken:
        reward = 0.0
    o_ok = task.pass_count - len(broken)
    return Grade(reward, h_ok, n_hidden, o_ok, task.pass_count, discarded, [])


def still_green(task: SweTask, outcomes: Mapping[str, str]) -> list[str]:
    """The node ids that passed before the bug and do not pass now (must be empty)."""
    return sorted(t for t in task.pass_tests if outcomes.get(t) != "passed")


def collect(
    task: SweTask, tree: Mapping[str, bytes], backend: str | SandboxBackend = "local"
) -> set[str]:
    """The node ids pytest collects from the package's suite on ``tree`` (in a sandbox)."""
    return set(run_tests_in_sandbox(task, tree, backend, 120.0, collect=True) or {})


def run_tests_in_sandbox(
    task: SweTask,
    tree: Mapping[str, bytes],
    backend: str | SandboxBackend,
    timeout_s: float,
    tests: tuple[str, ...] | None = None,
    collect: bool = False,
) -> dict[str, str] | None:
    """node id -> outcome for the package's suite on ``tree``; None if it never reported."""
    mark = "\x1e" + secrets.token_hex(16) + ":"
    report = f"/tmp/{secrets.token_hex(8)}.jsonl"
    cfg = {
        "paths": [f"/work/repo/{task.spec.pythonpath}".rstrip("/"), "/work/.grader"],
        "report": report,
        "plugin": PLUGIN,
        "tests": list(tests or task.spec.tests),
        "timeout": timeout_s,
        "mark": mark,
        "collect": collect,
    }
    files: dict[str, str | bytes] = {f"repo/{p}": b for p, b in tree.items()}
    files[f".grader/{PLUGIN}.py"] = PLUGIN_FILE.read_bytes()
    code = f"CFG = {json.dumps(json.dumps(cfg))}\n" + _GRADER
    size = sum(map(len, tree.values()))
    req = ExecRequest(
        code,
        files=files,
        timeout_s=timeout_s + 10,
        memory_mb=1024,
        max_output_bytes=(8 << 20) + size,
        env=command_env(),
    )
    res = get_backend(backend).run(req)
    head, sep, tail = res.stdout.rpartition(mark)
    if not sep:
        return None
    return parse_report(json.loads(tail.splitlines()[0]))
