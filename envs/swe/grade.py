"""The SWE reward: hidden tests on the agent's source changes, never on its test changes.

The rules, each closing a way to score without fixing the bug:

* **Hidden tests stay hidden.** The workspace an episode sees is the buggy repo with the test
  functions that the bug breaks removed (``workspace_tree``); they come back only at grading.
* **Tests are restored.** Grading starts from the pristine test files and configuration; of the
  agent's changes only Python files beside the package's own source count
  (``Package.is_source``). Edited, deleted or added tests, ``conftest.py`` files, pytest
  configuration, ``.pth``/``sitecustomize`` files are all discarded.
* **No tampering.** The code under test runs in pytest's process, so it could patch pytest, exit
  early or forge a report. A change whose added lines reach for the test machinery, the process
  or the interpreter (``TAMPER``: pytest, ``sys.exit``/``os._exit``, ``sys.modules``,
  ``builtins``, frames, signals, subprocesses, files, ``/proc``, the environment, ...) scores 0
  and says why; a fix of an injected bug needs none of these. The report travels after a
  random per-grade marker and the last one printed wins, after pytest has exited.
* **The rest stays green.** Every test that passed before the bug must still pass; otherwise
  the reward is 0 whatever the hidden tests say. Only tests defined in the restored test files
  count (a test file's ``from pkg import *`` would collect ``test_*`` written into the source).

Reward: the fraction of hidden tests passing (``mode="fraction"``), or 1 only if all pass
(``mode="all"``). All grading runs in a sandbox of the env's backend.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import json
import re
import secrets
from collections.abc import Mapping

from agentrl.sandboxes import ExecRequest, get_backend
from agentrl.sandboxes.base import SandboxBackend
from agentrl.sandboxes.workspace import command_env
from agentrl.tools.ast_lock import parse

from .tamper import screen
from .tasks import PLUGIN, PLUGIN_FILE, SweTask, parse_report, pristine

TAMPER = re.compile(
    r"pytest|conftest|unittest|\bsys\s*\.\s*(modules|exit|_getframe|settrace|setprofile|stdout|"
    r"stderr|__stdout__|__stderr__|argv|meta_path|path_hooks)|\b_exit\b|\bexit\s*\(|\bquit\s*\(|"
    r"__builtins__|\bbuiltins\b|\batexit\b|\bsignal\b|\bctypes\b|\bimportlib\b|__import__|"
    r"\bexec\s*\(|\beval\s*\(|\bcompile\s*\(|\bsubprocess\b|\bos\s*\.\s*(system|kill|fork|"
    r"exec\w*|spawn\w*|popen|environ|getenv|remove|unlink|write|open|dup2?)\b|\bfork\b|/proc|"
    r"\benviron\b|\bgetenv\b|\bopen\s*\(|\bfaulthandler\b|\binspect\b|\bgc\s*\.|\bthreading\b|"
    r"\bmultiprocessing\b|\bsocket\b|\bf_back\b|\bf_locals\b|\bf_globals\b|__code__|__globals__"
)

_GRADER = r"""
import json, os, subprocess
cfg = json.loads(CFG)
env = dict(os.environ, PYTHONPATH=os.pathsep.join(cfg["paths"]), AGENTRL_SWE_REPORT=cfg["report"])
cmd = ["python", "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", cfg["plugin"]]
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
    tamper: list[str]
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
    tree = dict(pristine(task.package))
    m = task.mutation
    tree[m.file] = m.apply(tree[m.file].decode("utf-8")).encode("utf-8")
    return tree


def workspace_tree(task: SweTask) -> dict[str, bytes]:
    """What the agent sees: the buggy repo with the hidden (failing) test functions removed."""
    tree = mutated_tree(task)
    hidden: dict[str, set[tuple[str, ...]]] = {}
    for node in task.fail_tests:
        file, *names = node.split("::")
        hidden.setdefault(file, set()).add(tuple(n.split("[", 1)[0] for n in names))
    for file, paths in hidden.items():
        tree[file] = _strip(tree[file].decode("utf-8"), paths).encode("utf-8")
    return tree


def _strip(source: str, paths: set[tuple[str, ...]]) -> str:
    """Remove the test functions named by ``paths`` (``(Class, func)`` or ``(func,)``)."""
    lines = source.splitlines(keepends=True)
    cuts: list[tuple[int, int, str]] = []

    def walk(body: list[ast.stmt], prefix: tuple[str, ...], indent: str) -> None:
        kept = 0
        for node in body:
            name = getattr(node, "name", None)
            if isinstance(node, ast.ClassDef):
                walk(node.body, (*prefix, node.name), " " * (node.col_offset + 4))
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and (*prefix, name) in paths
            ):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
                cuts.append((start, node.end_lineno or node.lineno, ""))
            else:
                kept += 1
        if prefix and kept == 0 and body:
            cuts.append((body[-1].end_lineno or 0, body[-1].end_lineno or 0, indent + "pass\n"))

    walk(parse(source).body, (), "")
    for start, end, filler in sorted(cuts, reverse=True):
        lines[start:end] = [filler] if filler else []
    return "".join(lines)


def graded_tree(task: SweTask, final: Mapping[str, bytes]) -> tuple[dict, list[str], list[str]]:
    """Buggy repo + the agent's source changes only; also (discarded paths, tamper hits)."""
    base, seen, orig = mutated_tree(task), workspace_tree(task), pristine(task.package)
    tree, discarded, tamper = dict(base), [], []
    for path in sorted(set(final) | set(seen)):
        new, old = final.get(path), seen.get(path)
        if new == old:
            continue
        if not task.spec.is_source(path):
            discarded.append(path)
            continue
        if new is None:
            tree.pop(path, None)
            continue
        tree[path] = new
        tamper += screen(path, new, orig.get(path), base.get(path))
        before = base.get(path, b"").decode("utf-8", "replace").splitlines()
        after = new.decode("utf-8", "replace").splitlines()
        for line in difflib.unified_diff(before, after, lineterm="", n=0):
            if line.startswith("+") and not line.startswith("+++"):
                if hit := TAMPER.search(line):
                    tamper.append(f"{path}: {hit.group(0)!r} in {line[1:].strip()[:80]!r}")
    return tree, discarded, tamper


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
            0.0, 0, n_hidden, 0, task.pass_count, discarded, tamper, "tampering: " + tamper[0]
        )
    outcomes = run_tests_in_sandbox(task, tree, backend, timeout_s)
    if outcomes is None:
        return Grade(
            0.0, 0, n_hidden, 0, task.pass_count, discarded, [], "the test run did not finish"
        )
    hidden = set(task.fail_tests)
    h_ok = sum(outcomes.get(t) == "passed" for t in hidden)
    own = {t for t in outcomes if t not in hidden and _defined_in_tests(tree, t)}
    o_ok = sum(outcomes[t] == "passed" for t in own)
    reward = h_ok / n_hidden if mode == "fraction" else float(h_ok == n_hidden)
    if o_ok < task.pass_count:
        reward = 0.0
    return Grade(reward, h_ok, n_hidden, o_ok, task.pass_count, discarded, [])


def _defined_in_tests(tree: Mapping[str, bytes], nodeid: str) -> bool:
    """Is the test's function or class defined in its (restored) test file, not only imported?

    A test file's ``from pkg import *`` collects ``test_*`` functions written into the source;
    counted, they could stand in for the tests a change broke."""
    file, _, rest = nodeid.partition("::")
    return rest.split("::")[0].split("[")[0] in _top_names(tree.get(file, b""))


@functools.lru_cache(maxsize=256)
def _top_names(source: bytes) -> frozenset[str]:
    try:
        body = parse(source).body
    except (SyntaxError, ValueError):
        return frozenset()
    names = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    names |= {n.name for n in body if isinstance(n, ast.ClassDef)}
    for n in body:
        if isinstance(n, ast.Assign):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return frozenset(names)


def run_tests_in_sandbox(
    task: SweTask,
    tree: Mapping[str, bytes],
    backend: str | SandboxBackend,
    timeout_s: float,
    tests: tuple[str, ...] | None = None,
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
