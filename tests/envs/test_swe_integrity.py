"""SWE reward integrity, round 3 (issue 39): the verdict is out of the agent's code's reach.

Every test here runs the real grader on the real shipped PyPI-package tasks (pytest inside the
local sandbox). Each was a hole that paid on the old grader (noted per test) and must stay shut:

* reflection the old denylist screen did not know (a name the file imports, fullwidth
  spellings, private module aliases) rewrote the report plugin's outcome ranking;
* a ``KeyboardInterrupt`` in a test's call phase was recorded as passed;
* "the rest stays green" compared counts, so breaking a green test and fixing a failing one
  kept 1.0;
* hidden tests defined in a base class (cachetools' mixins) stayed in the workspace.

The property test gives the added code full Python (imports, processes, files, any
spelling), drawn from the standard library's own source, and checks that no accepted change
turns a failing hidden test into a pass.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentrl.envs.swe import grade as grading
from agentrl.envs.swe.tasks import load_tasks, pristine

_RANK = '{"passed": 2, "skipped": 1, "failed": 0}'
# Each scored 1.0 on the old grader with the bug still in place (reflection the screen missed).
REFLECTION = {
    # toolz/functoolz.py already does `from importlib import import_module`
    "imported-name": ("toolz-0-001", f'import_module("agentrl_swe_" + "report")._RANK = {_RANK}\n'),
    # Python folds fullwidth identifiers to ASCII; a byte-level screen sees other letters
    "fullwidth": (
        "toolz-0-001",
        f'ｉｍｐｏｒｔ_ｍｏｄｕｌｅ("agentrl_swe_report")._RANK = {_RANK}\n',
    ),
    # the report plugin's module holds `os`: reach it through sys.modules' alias in random
    "spawned-rewriter": (
        "toolz-0-001",
        'import_module("sub" + "process").Popen(["sh", "-c", "sleep 1; for f in /tmp/*.jsonl; do '
        'sed -i s/failed/passed/g $f; done"], start_new_session=True)\n',
    ),
}


def _task(tid: str):
    return next(t for t in load_tasks() if t.id == tid)


def _after_imports(source: bytes, code: str) -> bytes:
    """``code`` as module-level statements right after the file's last top-level import."""
    tree = ast.parse(source)
    last = max(n.end_lineno or 0 for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom))
    lines = source.decode("utf-8").splitlines(keepends=True)
    return "".join([*lines[:last], code, *lines[last:]]).encode("utf-8")


def _in_function(task, code: str) -> dict[str, bytes]:
    """The workspace with ``code`` as the first statement of the buggy function (bug kept)."""
    tree = grading.workspace_tree(task)
    f, name = task.mutation.file, task.mutation.function.rsplit(".", 1)[-1]
    src = tree[f].decode("utf-8")
    node = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )
    first = node.body[0]
    lines = src.splitlines(keepends=True)
    pad = " " * first.col_offset
    body = "".join(pad + line + "\n" for line in code.splitlines())
    lines.insert(first.lineno - 1, body)
    tree[f] = "".join(lines).encode("utf-8")
    return tree


@pytest.mark.parametrize("name", sorted(REFLECTION))
def test_reflection_the_old_screen_missed_scores_zero(name: str) -> None:
    tid, code = REFLECTION[name]
    task = _task(tid)
    tree = grading.workspace_tree(task)
    f = task.mutation.file
    tree[f] = _after_imports(tree[f], code)
    g = grading.grade(task, tree)
    assert g.reward == 0.0 and g.hidden_passed == 0, g.summary()


def test_full_python_in_the_buggy_function_scores_zero() -> None:
    """Added code with everything Python offers, inside the function under test, on every
    real package: imports, a process that rewrites reports after pytest exits, file writes,
    private module aliases, a value that equals everything."""
    payloads = [
        "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 1; sed -i s/failed/passed/ /tmp/*'])",
        "open('/tmp/x', 'w').write('passed')",
        "raise KeyboardInterrupt",
        "class E(str):\n    def __eq__(self, o):\n        return True\nreturn E()",
        "return (lambda: 0).__globals__['__builtins__']",
    ]
    for tid in ("inflection-0-003", "cachetools-0-002", "toolz-0-003"):
        task = _task(tid)
        for code in payloads:
            g = grading.grade(task, _in_function(task, code))
            assert g.reward == 0.0 and g.error, (tid, code, g.summary())


def _stdlib_statements(n: int, seed: int) -> list[str]:
    """``n`` statements of real, full Python: the standard library's own modules."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    for name in ("subprocess.py", "os.py", "importlib/__init__.py", "inspect.py", "shutil.py"):
        src = (lib / name).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.stmt) and not isinstance(node, ast.FunctionDef | ast.ClassDef):
                out.append(ast.unparse(node))
    random.Random(seed).shuffle(out)
    return out[:n]


def test_no_accepted_change_of_full_python_turns_a_failing_hidden_test_into_a_pass() -> None:
    """Property: any statement at all (here: 300 from the stdlib's source) added to the buggy
    function or to its module either is refused, or leaves the hidden tests failing."""
    task = _task("toolz-0-003")
    accepted = []
    for i, stmt in enumerate(_stdlib_statements(300, seed=0)):
        tree = _in_function(task, stmt) if i % 2 else grading.workspace_tree(task)
        if not i % 2:
            f = task.mutation.file
            tree[f] = _after_imports(tree[f], stmt + "\n")
        _, _, refused = grading.graded_tree(task, tree)
        if not refused:
            accepted.append(tree)
    assert accepted  # plain statements (`pass`, `x = 0`, `return`) do get through
    for tree in accepted[:3]:  # and run for real
        g = grading.grade(task, tree)
        assert g.hidden_passed == 0 and g.reward == 0.0, g.summary()


def test_an_interrupted_test_is_not_passed() -> None:
    """pytest re-raises KeyboardInterrupt from the call phase, so the test had only a passed
    setup report: the old plugin recorded it as passed (bug still in place)."""
    task = _task("minilib-0-000")
    tree, _, refused = grading.graded_tree(task, _in_function(task, "raise KeyboardInterrupt"))
    assert refused  # the screen refuses it; the plugin's rule is checked on its own here
    (hidden,) = task.fail_tests
    outcomes = grading.run_tests_in_sandbox(task, tree, "local", 60.0, tests=(hidden,))
    assert outcomes == {hidden: "failed"}, outcomes


def _swap_a_green_test_for_a_failing_one():
    """toolz-0-003 fixed, toolz-0-004's bug added (breaks test_get, green before) and
    toolz.__version__ made a str (test_has_version fails on the pristine sdist)."""
    task, other = _task("toolz-0-003"), _task("toolz-0-004")
    tree = grading.workspace_tree(task)
    f = task.mutation.file
    tree[f] = other.mutation.apply(task.mutation.revert(tree[f].decode())).encode()
    init = tree["toolz/__init__.py"].decode()
    tree["toolz/__init__.py"] = init.replace('rv = version("toolz")', 'rv = "1.2.0"').encode()
    return task, tree


def test_breaking_a_green_test_and_fixing_a_failing_one_scores_zero() -> None:
    """The old rule counted passing others (185 >= 185): reward 1.0 with test_get broken."""
    task, tree = _swap_a_green_test_for_a_failing_one()
    g = grading.grade(task, tree)
    assert g.reward == 0.0, g.summary()


def test_the_rest_stays_green_is_a_set_of_node_ids() -> None:
    """The rule itself on the real outcomes of that change (the screen bypassed)."""
    task, tree = _swap_a_green_test_for_a_failing_one()
    tree = grading.graded_tree(task, tree)[0]
    outcomes = grading.run_tests_in_sandbox(task, tree, "local", 120.0)
    assert outcomes is not None
    assert outcomes["toolz/tests/test_package.py::test_has_version"] == "passed"
    assert outcomes["toolz/tests/test_itertoolz.py::test_get"] != "passed"
    assert grading.still_green(task, outcomes) == ["toolz/tests/test_itertoolz.py::test_get"]


def test_hidden_tests_defined_in_a_base_class_are_removed_where_defined() -> None:
    """cachetools' tests live in mixins (tests/__init__.py): removing them only from the
    subclass's file left them in the workspace for the agent to read and run."""
    task = _task("cachetools-0-000")
    tree = grading.workspace_tree(task)
    mixin = tree["tests/__init__.py"].decode()
    assert "def test_getsizeof_subclass" in pristine("cachetools")["tests/__init__.py"].decode()
    assert "def test_getsizeof_subclass" not in mixin


@pytest.mark.parametrize("package", ["minilib", "inflection", "cachetools", "toolz"])
def test_the_visible_suite_collects_no_hidden_node_id(package: str) -> None:
    tasks = [t for t in load_tasks() if t.package == package]
    # One sandboxed pytest collection per task, each a single-threaded child: two at a time.
    with ThreadPoolExecutor(max_workers=2) as pool:
        collected = pool.map(lambda t: grading.collect(t, grading.workspace_tree(t)), tasks)
        for task, ids in zip(tasks, collected, strict=True):
            assert ids, task.id
            hidden = set(task.fail_tests) & ids
            assert not hidden, (task.id, sorted(hidden)[:5])


def test_many_new_files_are_refused_before_any_parsing() -> None:
    task = _task("toolz-0-003")
    tree = grading.workspace_tree(task)
    for i in range(5000):
        tree[f"toolz/gen_{i}.py"] = b"x = (" * 50_000
    g = grading.grade(task, tree)
    assert g.reward == 0.0 and "too many" in g.error, g.summary()


def test_reflective_old_code_stays_where_it_was() -> None:
    """toolz's module `__getattr__` already calls `globals()`: reusing that expression to
    reach `__builtins__` (and from there everything) is refused; restoring it is not."""
    src = pristine("toolz")["toolz/__init__.py"]
    text = src.decode()
    old = "        globals()[name] = rv\n"
    assert old in text
    for new in (
        '        globals()["__builtins__"]["exec"]("...")\n',
        "        name = 'compose'\n",
        "        rv = globals()\n",
    ):
        changed = text.replace(old, old + new).encode()
        assert grading.screen("toolz/__init__.py", changed, src, src), new
    assert (
        grading.screen("toolz/__init__.py", text.replace(old, old + old).encode(), src, src) == []
    )
