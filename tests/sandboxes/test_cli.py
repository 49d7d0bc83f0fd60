"""``agentrl sandbox run`` through the CLI entry, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

ENTRY = "from agentrl.sandboxes.cli import main; raise SystemExit(main(sys.argv[1:]))"


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", f"import sys; {ENTRY}", "sandbox", "run", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)


def test_prints_stdout_and_exit_code(local, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print('hello')\nraise SystemExit(3)\n")
    out = _cli("--lang", "python", "--timeout", "5", "--memory", "256M", str(prog))
    assert (out.returncode, out.stdout) == (3, "hello\n")


def test_json_and_status_codes(local):
    out = _cli("--json", "--timeout", "1", "-", stdin="while True: pass")
    assert out.returncode == 0 and json.loads(out.stdout)["status"] == "timeout"
    out = _cli("--timeout", "1", "-", stdin="while True: pass")
    assert out.returncode == 124 and "timeout" in out.stderr
    out = _cli("--lang", "bash", "-", stdin="echo hi >&2; exit 0")
    assert (out.returncode, out.stderr) == (0, "hi\n")


def _usage_error(out: subprocess.CompletedProcess, culprit: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out
    assert len(lines) == 1 and culprit in lines[0], out.stderr
    assert "Traceback" not in out.stderr


BAD_ARGS = [
    (["--timeout", "0"], "0"),
    (["--timeout", "-1"], "-1"),
    (["--timeout", "nan"], "nan"),
    (["--memory", "12XB"], "12XB"),
    (["--memory", "0"], "--memory"),
    (["--memory", "1K"], "1K"),
    (["--max-output", "lots"], "lots"),
    (["--stdin", "/nonexistent/in.txt"], "/nonexistent/in.txt"),
    (["--backend", "ruby"], "ruby"),
    (["--lang", "cobol"], "cobol"),
]


@pytest.mark.parametrize("args,culprit", BAD_ARGS)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, culprit):
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    _usage_error(_cli(*args, str(prog)), culprit)
    out = _cli("--json", *args, str(prog))
    assert out.returncode == 2 and culprit in json.loads(out.stdout)["error"], out


def test_missing_and_binary_files_are_usage_errors(tmp_path):
    _usage_error(_cli(str(tmp_path / "missing.py")), "missing.py")
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"\xff\xfe\x00print(1)")
    _usage_error(_cli(str(binary)), "bin.py")


def test_failing_program_is_not_a_usage_error(local):
    out = _cli("-", stdin="raise SystemExit(2 + 1)")
    assert out.returncode == 3


def test_cli_docker_warm_container_has_the_cli_memory(monkeypatch):
    from agentrl.sandboxes import cli

    seen = {}
    monkeypatch.setattr(cli, "get_backend", lambda name, **kw: seen.update(name=name, **kw))
    cli.backend_for("docker", memory_mb=256)
    assert seen["pool_memory_mb"] == 256 and seen["pool_size"] == seen["pool_launches"] == 1


@pytest.mark.docker
def test_cli_docker_run_starts_exactly_one_container(tmp_path):
    from agentrl.sandboxes.docker_backend import docker_status

    ok, why = docker_status()
    if not ok:
        pytest.skip(why)
    import docker

    client = docker.from_env()
    prog = tmp_path / "p.py"
    prog.write_text("print('hi from docker')\nraise SystemExit(4)\n")
    since = int(time.time()) - 1
    cmd = [sys.executable, "-c", f"import sys; {ENTRY}", "sandbox", "run", "--backend", "docker"]
    proc = subprocess.Popen(
        [*cmd, "--memory", "256M", str(prog)], stdout=subprocess.PIPE, text=True
    )
    stdout, _ = proc.communicate(timeout=120)
    until = int(time.time()) + 1
    mine = {"type": "container", "event": "create", "label": f"agentrl.pid={proc.pid}"}
    created = [e["id"] for e in client.events(since=since, until=until, decode=True, filters=mine)]
    assert (proc.returncode, stdout) == (4, "hi from docker\n")
    assert len(created) == 1, created
    left = client.containers.list(all=True, filters={"label": f"agentrl.pid={proc.pid}"})
    assert left == []
