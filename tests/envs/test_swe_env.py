"""`swe/*`: mutation, the persistent workspace (both backends), hidden tests and grading.

Everything runs for real: the package's own pytest suite inside the sandbox, the agent's
tools through the env, and the reward hacks an RL policy would find (delete the tests, a
conftest that passes everything, an early exit in the source) must score 0.
"""

from __future__ import annotations

import shutil

import pytest

from agentrl.envs import make
from agentrl.envs.swe import grade as grading
from agentrl.envs.swe.mutate import sites
from agentrl.envs.swe.tasks import build, load_tasks, pristine
from agentrl.types import Message, ToolCall


def _sandbox_or_skip(backend: str = "local") -> None:
    from agentrl.sandboxes import ExecRequest, get_backend

    try:
        res = get_backend(backend).run(ExecRequest("print(1)"))
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{backend} sandbox unavailable: {e}")
    if not res.ok:
        pytest.skip(f"{backend} sandbox unavailable: {res.stderr[-200:]}")


def _call(name: str, **args) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, args, id=f"c-{name}")])


def test_mutations_round_trip_on_real_source() -> None:
    src = pristine("inflection")["inflection/__init__.py"].decode()
    found = sites("inflection/__init__.py", src)
    assert {m.kind for m in found} >= {"binop", "compare", "off_by_one", "return", "branch"}
    assert found == sites("inflection/__init__.py", src)  # stable order: seeds reproduce
    for m in found:
        mutated = m.apply(src)
        assert mutated != src and m.revert(mutated) == src


def test_build_keeps_only_green_to_red_mutants() -> None:
    tasks = build("minilib", 2, seed=3)
    assert tasks
    for t in tasks:
        assert t.fail_tests and t.pass_count > 0
        assert t.id.startswith("minilib-3-")


def test_hidden_tests_are_not_in_the_workspace() -> None:
    task = next(t for t in load_tasks() if t.package == "minilib")
    seen, full = grading.workspace_tree(task), grading.mutated_tree(task)
    for node in task.fail_tests:
        file, name = node.split("::")[0], node.split("::")[-1].split("[")[0]
        assert f"def {name}(" in full[file].decode()
        assert f"def {name}(" not in seen[file].decode()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_workspace_persists_files_and_cwd_not_processes(backend: str) -> None:
    _sandbox_or_skip(backend)
    from agentrl.sandboxes.workspace import Workspace

    ws = Workspace({"a.txt": b"one\n", "pkg/m.py": b"x = 1\n"}, backend, timeout_s=10)
    r = ws.run("mkdir -p d && cd d && echo two > b.txt && rm ../a.txt && pwd")
    assert r.exit_code == 0 and r.output.strip() == "/work/repo/d"
    assert ws.cwd == "d" and ws.read("b.txt") == b"two\n"  # relative to the kept cwd
    assert not ws.exists("/work/repo/a.txt")
    r = ws.run("(sleep 30; echo late > late.txt) & echo started")
    r = ws.run("sleep 2; ls; cat /etc/shadow 2>&1 | head -1; exit 7")
    assert "late.txt" not in r.output and r.exit_code == 7  # the background job died
    r = ws.run("echo keep > k.txt; sleep 30", timeout_s=2)
    assert r.exit_code is None and "timed out" in r.note
    big = ws.run("yes | head -c 200000")
    assert len(big.output) <= ws.max_output_chars + 200 and "cut" in big.output
    ws.reset()
    assert ws.files() == {"a.txt": b"one\n", "pkg/m.py": b"x = 1\n"} and ws.cwd == "."


def test_workspace_has_no_network_and_no_host_files(tmp_path) -> None:
    _sandbox_or_skip()
    import secrets
    import socket
    from pathlib import Path

    from agentrl.sandboxes.workspace import Workspace

    secret = Path.home() / f".agentrl-secret-{secrets.token_hex(4)}"
    secret.write_text("TOPSECRET")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        ws = Workspace({"f": b""}, timeout_s=10)
        probe = (
            f"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('CONNECTED')"
        )
        r = ws.run(f'cat {secret}; python -c "{probe}"')
        assert "TOPSECRET" not in r.output and "CONNECTED" not in r.output
        assert "No such file" in r.output
    finally:
        server.close()
        secret.unlink()


def test_tools_give_clear_errors() -> None:
    _sandbox_or_skip()
    env = make("swe/tiny-repo-v0")
    env.reset(seed=0)
    tools = env.tools
    path = env.task.answer.mutation.file
    assert "not found" in tools.str_replace(path, "no such text", "x")
    assert "occurs" in tools.str_replace(path, "return", "x")
    assert "does not exist" in tools.view("nope.py")
    assert "\t" in tools.view(path, 1, 3) and len(tools.view(path, 1, 3).splitlines()) == 3
    assert "minilib/core.py" in tools.view(".")


def test_edits_to_tests_are_discarded_and_tampering_scores_zero() -> None:
    _sandbox_or_skip()
    task = next(t for t in load_tasks() if t.package == "minilib")
    files = grading.workspace_tree(task)
    tests = {p: b"def test_ok():\n    assert True\n" for p in files if p.startswith("tests/test_")}
    g = grading.grade(task, {**files, **tests})
    assert g.reward == 0.0 and set(tests) <= set(g.discarded)
    src = task.mutation.file
    hacked = dict(files, **{src: b"import sys\nsys.modules['pytest'] = None\n" + files[src]})
    g = grading.grade(task, hacked)
    assert g.reward == 0.0 and g.tamper


def test_real_package_oracle_fixes_the_bug() -> None:
    _sandbox_or_skip()
    if shutil.which("bwrap") is None:
        pytest.skip("needs the local sandbox")
    env = make("swe/pyrepo-v0", package="inflection")
    env.reset(seed=0)
    _, r, term, _, _ = env.step(env.oracle_action())
    assert not term
    _, r, term, _, info = env.step(env.oracle_action())
    assert term and r == 1.0, info["grade"]
    env.reset(seed=0)
    _, r, term, _, info = env.step(_call("submit"))
    assert term and r == 0.0
