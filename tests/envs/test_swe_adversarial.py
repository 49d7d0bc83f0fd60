"""Red-team of the `swe/*` reward: ways an RL policy could score without fixing the bug.

Each test is a hole that was open (the exploit scored 1 on the shipped tasks before its fix)
and must stay closed. Exploits that the static screen (``envs/swe/edits.py``) rejects never
reach a sandbox, so most of these run in milliseconds; the ones that need the real suite run
it for real in the local sandbox.
"""

from __future__ import annotations

import pytest

from agentrl.envs.swe import grade as grading
from agentrl.envs.swe.edits import screen
from agentrl.envs.swe.tasks import load_tasks, pristine

# Each one rewrote the report plugin's ranking so that every test reads "passed" (reward 1
# on minilib-0-000 with the bug still in place), spelled so that the old TAMPER regex missed it.
_RANK = '["agentrl_swe_" + "report"]._RANK = {"passed": 2, "skipped": 1, "failed": 0}'
EXPLOITS = {
    "alias-sys": f"import sys as _s\n_s.modules{_RANK}\n",
    "from-sys": f"from sys import modules as _m\n_m{_RANK}\n",
    "getattr-string": f'import sys\ngetattr(sys, "mod" + "ules"){_RANK}\n',
    "utf-7-cookie": "# coding: utf-7\nimport sys as _s\n_s.m+AG8-dules" + _RANK + "\n",
    "always-equal": (
        "class _E(str):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = str.__hash__\n"
    ),
    "always-equal-type": '_E = type("E", (str,), {"__e" + "q__": lambda s, o: True})\n',
    "frame-walk": "def _f(g):\n    return g.gi_frame.f_back\n",
    "reflective-vars": '_v = vars()["__buil" + "tins__"]\n',
    "new-import": "import gc as _g\n",
    # inflection imports re: re.enum re-exports builtins (as bltns) and sys
    "reexported-builtins": f'_m = re.enum.bltns.getattr(re.enum.sys, "mod" + "ules")\n_m{_RANK}\n',
    "match-class-attrs": f"match re.enum.sys:\n    case _Mod(modules=_m):\n        _m{_RANK}\n",
    "inspect-members": '_d = dict(re.enum.sys.inspect.getmembers(re.enum.sys))["mod" + "ules"]\n',
}


def _task(package: str = "minilib"):
    return next(t for t in load_tasks() if t.package == package)


def _with_prefix(task, code: str) -> dict[str, bytes]:
    tree = grading.workspace_tree(task)
    f = task.mutation.file
    tree[f] = code.encode("utf-8") + tree[f]
    return tree


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_exploit_scores_zero_and_says_why(name: str) -> None:
    task = _task("inflection" if "re.enum" in EXPLOITS[name] else "minilib")
    g = grading.grade(task, _with_prefix(task, EXPLOITS[name]))
    assert g.reward == 0.0 and g.tamper, g.summary()
    assert g.error.startswith("refused: ")


def test_exploit_hidden_in_a_non_utf8_file_is_rejected() -> None:
    task = _task()
    tree = _with_prefix(task, "")
    tree[task.mutation.file] += b"\n# \xff\xfe\n"
    assert screen(task.mutation.file, tree[task.mutation.file], None, None)


@pytest.mark.parametrize("package", ["minilib", "inflection", "cachetools", "toolz"])
def test_every_oracle_passes_the_screen(package: str) -> None:
    """Restoring the original code never trips the screen (no false positive on the oracle)."""
    tasks = [t for t in load_tasks() if t.package == package]
    assert tasks
    for task in tasks:
        tree = grading.workspace_tree(task)
        m = task.mutation
        tree[m.file] = m.revert(tree[m.file].decode("utf-8")).encode("utf-8")
        _, _, tamper = grading.graded_tree(task, tree)
        assert tamper == [], (task.id, tamper)


def test_moving_an_existing_statement_within_its_function_is_accepted() -> None:
    """Old code is free inside its own function: a sensitive statement (here one with an
    import) that the function already had may move; the same statement elsewhere may not."""
    task = next(t for t in load_tasks() if t.package == "toolz")
    src = pristine("toolz")["toolz/__init__.py"]
    text = src.decode()
    line = "        from importlib.metadata import version\n"
    assert line in text
    moved = text.replace(line, "").replace("        rv = version", line + "        rv = version")
    assert screen("toolz/__init__.py", moved.encode(), src, src) == []
    elsewhere = text.replace("def __getattr__(name):\n", "def __getattr__(name):\n" + line, 1)
    elsewhere = elsewhere.replace(
        "functoolz._sigs.create", line.strip() + "\nfunctoolz._sigs.create"
    )
    assert screen("toolz/__init__.py", elsewhere.encode(), src, src)
    assert task


_LEAK = """
import sys
from agentrl.envs.swe.tasks import DATA
from agentrl.sandboxes.local import LocalBackend
from agentrl.sandboxes.workspace import Workspace
assert DATA.is_relative_to(sys.argv[1]), DATA
backend = LocalBackend(ro_binds=(sys.argv[1],))  # site-packages, as the prefix bind exposes it
res = Workspace({"a.py": b""}, backend).run(f"ls {DATA}; head -c 300 {DATA}/tasks.jsonl; echo END")
backend.close()
print(res.render())
"""


def test_task_data_is_not_readable_from_a_workspace_of_an_installed_agentrl(tmp_path) -> None:
    """A non-editable install puts envs/swe/data (hidden tests, pristine sdists) under the
    interpreter prefix, which every sandbox binds read-only: `head tasks.jsonl` in the
    agent's bash read every task's hidden tests and mutation. The install is laid out as
    pyproject.toml's package map would (outside /work and /tmp, which sandboxes cover with tmpfs)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from agentrl.sandboxes.local import LocalBackend

    try:
        LocalBackend().close()
    except RuntimeError as e:
        pytest.skip(str(e))
    repo = Path(__file__).resolve().parents[2]
    site = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentrl-site-"))
    site.chmod(0o755)  # world-readable, as site-packages is
    try:
        junk = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(repo / "agentrl", site / "agentrl", ignore=junk)
        for sub in ("envs", "tools", "sandboxes", "configs"):
            shutil.copytree(repo / sub, site / "agentrl" / sub, ignore=junk)
        env = dict(os.environ, PYTHONPATH=str(site))
        out = subprocess.run(
            [sys.executable, "-c", _LEAK, str(site)],
            cwd=site,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(site, ignore_errors=True)
    assert out.returncode == 0 and "END" in out.stdout, out.stderr[-2000:]
    assert "fail_tests" not in out.stdout and ".tar.gz" not in out.stdout, out.stdout


def _workspace(files: dict[str, bytes] | None = None):
    from agentrl.sandboxes.workspace import Workspace

    pytest.importorskip("agentrl.sandboxes.local")
    try:
        return Workspace(files or {"a.py": b"x = 1\n"})
    except RuntimeError as e:
        pytest.skip(str(e))


def test_cd_into_a_new_empty_folder_does_not_brick_the_workspace() -> None:
    """`mkdir sub && cd sub` kept cwd=sub but not the (empty) folder: every later command of
    the episode died in the driver's chdir ("sandbox ended the command")."""
    ws = _workspace()
    assert ws.run("mkdir sub && cd sub").applied
    res = ws.run("pwd; echo ok > f.txt")
    assert res.applied and res.output.strip() == "/work/repo/sub", res.render()
    assert ws.read("/work/repo/sub/f.txt") == b"ok\n"


def test_a_forged_working_directory_stays_inside_the_workspace() -> None:
    """The command writes /tmp/.pwd itself; a lie such as /work/repository became cwd
    '../repository' on the host."""
    ws = _workspace()
    ws.run("mkdir -p /work/repository; cd /work/repository")
    assert ws.cwd == "."
    res = ws.run("pwd")
    assert res.applied and res.output.strip() == "/work/repo", res.render()


def test_edits_after_cd_land_on_the_edited_file() -> None:
    """The driver reports root-relative paths but they were stored relative to the old cwd:
    after `cd pkg`, `sed -i` on pkg/m.py was recorded as pkg/pkg/m.py (the fix was lost and
    grading saw the buggy file)."""
    ws = _workspace({"pkg/m.py": b"x = 1\n", "pkg/old.py": b""})
    ws.run("cd pkg")
    assert ws.cwd == "pkg"
    assert ws.run("sed -i 's/1/2/' m.py && rm old.py").applied
    files = ws.files()
    assert files["pkg/m.py"] == b"x = 2\n" and "pkg/old.py" not in files, sorted(files)
    assert not any(p.startswith("pkg/pkg/") for p in files), sorted(files)


def test_str_replace_keeps_the_bytes_it_does_not_touch() -> None:
    """A file with a non-UTF-8 byte (a latin-1 comment) came back from str_replace with every
    such byte turned into U+FFFD; a lone surrogate in new_str raised instead of answering."""
    from agentrl.envs import make
    from agentrl.types import Message, ToolCall

    env = make("swe/tiny-repo-v0")
    env.reset(seed=0)
    ws = env.swe.ws
    ws.write("minilib/core.py", b"# caf\xe9\n" + ws.read("minilib/core.py"))
    args = {"path": "minilib/core.py", "old_str": "def clamp", "new_str": "def clamp"}
    for new in ("def clamp", "def clamp  # \udcff"):
        args["new_str"] = new
        obs, *_ = env.step(Message("assistant", "", tool_calls=[ToolCall("str_replace", args)]))
        assert obs.messages[0].content.startswith("Edited"), obs.messages[0].content
        assert ws.read("minilib/core.py").startswith(b"# caf\xe9\n")


def test_a_huge_source_file_is_rejected_before_parsing() -> None:
    """ast.parse of a 20 MB source file in the host's grading thread costs seconds and GBs."""
    task = _task()
    tree = _with_prefix(task, "x = 1\n" * 400_000)
    g = grading.grade(task, tree)
    assert g.reward == 0.0 and "too large" in g.error, g.summary()


def test_a_rolled_back_command_does_not_show_the_drivers_report() -> None:
    """A file too big for the output cap rolled the command back and showed the agent the
    driver's cut report (the random mark and base64 of the workspace) as the output."""
    ws = _workspace()
    res = ws.run("head -c 30000000 /dev/zero | tr '\\0' a > big.txt; echo hi")
    assert not res.applied and "rolled back" in res.note
    assert "YWFh" not in res.output and "\x1e" not in res.output, res.output[:300]
    assert "big.txt" not in ws.files()


def test_tests_defined_in_the_source_do_not_count_as_still_green() -> None:
    """toolz/tests/test_serialization.py does `from toolz import *`: `def test_n(): pass` added
    to toolz/__init__.py were collected there as passing "other" tests, so they could stand in
    for tests that the change broke (the rest-stays-green rule is a count): here they hid the
    real test that they break themselves."""
    task = next(t for t in load_tasks() if t.package == "toolz")
    tree = grading.workspace_tree(task)
    m = task.mutation
    tree[m.file] = m.revert(tree[m.file].decode("utf-8")).encode("utf-8")
    fakes = "".join(f"\n\ndef test_fake_{i}():\n    pass\n" for i in range(20))
    tree["toolz/__init__.py"] += fakes.encode()
    g = grading.grade(task, tree)
    # Before: the fakes broke a real test (toolz checks its namespace), 166/167 others passed,
    # but the 20 fakes made it 186/167 and the reward 1. Now new definitions are outside the
    # repair language, and "still green" is a set of node ids the fakes are not in.
    assert g.reward == 0.0 and g.error.startswith("refused: "), g.summary()
