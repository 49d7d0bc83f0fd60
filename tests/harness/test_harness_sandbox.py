"""`rollout.harness.sandbox: local`: the command agent runs in bubblewrap and reaches only the
gateway's port.

Real parts: bubblewrap, the tiny qwen2 model, the in-process gateway under uvicorn, the real
`openai` client inside the sandbox, the env's grader. The adversary (`sandbox_probe_agent.py`)
has full Python and reports what it could do; the test also checks the host side (files not
written, the test's listener never reached, no sandboxed process left after a timeout).
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="pip install 'agentrl[serve]'")
pytest.importorskip("uvicorn", reason="pip install 'agentrl[serve]'")
pytest.importorskip("openai", reason="pip install openai")

from test_harness_train import metrics, overrides  # noqa: E402

from agentrl.cli import main  # noqa: E402
from agentrl.sandboxes.command import unavailable  # noqa: E402

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(unavailable() is not None, reason=f"local sandbox: {unavailable()}"),
]
HERE = Path(__file__).resolve().parent
SANDBOX = {"rollout__harness__sandbox": "local", "rollout__harness__readonly_paths": f"[{HERE}]"}


def test_command_agent_trains_in_the_sandbox(agentrl_cache: Path, tmp_path: Path) -> None:
    """The unchanged command agent (openai client from OPENAI_BASE_URL, answer on stdout)
    trains one GRPO step from inside the sandbox at the env grader's full reward."""
    out = tmp_path / "run"
    command = f"{sys.executable} {HERE / 'command_agent.py'}"
    args = ["train", "--agent-command", command, "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1, **SANDBOX)]) == 0
    (row,) = metrics(out)
    assert row["harness/episodes"] == 4 and row["harness/infra_failed"] == 0
    assert row["reward/mean"] == 1.0


def _listener() -> tuple[socket.socket, list[object]]:
    """A host loopback service the agent must not reach; records every accepted peer."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    accepted: list[object] = []

    def serve() -> None:
        while True:
            try:
                conn, peer = sock.accept()
            except OSError:
                return
            accepted.append(peer)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return sock, accepted


def _host_cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def test_the_sandboxed_agent_reaches_only_its_session(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even seeds: the adversary fails to read a file the test made and the run folder, to
    reach the test's loopback listener, to write outside its working dir; it sees none of
    the trainer's environment or processes. Odd seeds hang after starting a setsid daemon:
    the timeout kills the whole sandboxed tree (no process with the daemon's marker is left)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("trainer-side secret")
    escape = tmp_path / "escaped.txt"
    monkeypatch.setenv("AGENTRL_SERVE_TOKEN", "a-token-the-agent-must-not-see-0123456789")
    monkeypatch.setenv("HARNESS_TRAINER_SECRET", "the-trainers-own-variable")
    listener, accepted = _listener()
    marker = f"{random.randrange(10**6, 10**7)}.{random.randrange(10**3, 10**4)}"
    out = tmp_path / "run"
    target = {
        "secret": str(secret),
        "run": str(out),
        "port": listener.getsockname()[1],
        "write": str(escape),
        "marker": marker,
    }
    command = f"{sys.executable} {HERE / 'sandbox_probe_agent.py'} '{json.dumps(target)}'"
    args = ["train", "--agent-command", command, "--env", "math/calc-easy-v0"]
    extra = {"trainer__steps": 1, "trainer__dump_rollouts_every": 1}
    extra |= {"rollout__harness__timeout_s": 20}  # the hanging runs wait it out
    try:
        assert main([*args, *overrides(agentrl_cache, out, **extra, **SANDBOX)]) == 0
    finally:
        listener.close()
    (row,) = metrics(out)
    assert row["harness/failed/timeout"] == 2 and row["harness/episodes"] == 2
    assert not [c for c in _host_cmdlines() if marker in c]  # the daemon died with its box
    rows = (out / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    reports = [json.loads(json.loads(r)["metadata"]["answer"]) for r in rows]
    assert len(reports) == 2
    for rep in reports:
        assert rep["read_secret"] == "FileNotFoundError"
        assert rep["list_run"] == "FileNotFoundError"
        assert rep["read_config"] == "FileNotFoundError"
        assert rep["other_port"] == "ConnectionRefusedError"
        assert rep["write_host_tmp"] == "FileNotFoundError"
        assert rep["write_own_code"] in ("OSError", "PermissionError")  # read-only bind
        assert rep["write_usr"] in ("OSError", "PermissionError")
        assert rep["write_workdir"] == "ok"  # its own /work
        assert rep["uid"] != 0
        assert "AGENTRL_SERVE_TOKEN" not in rep["env"]
        assert "HARNESS_TRAINER_SECRET" not in rep["env"]
        assert "OPENAI_BASE_URL" in rep["env"]
        assert not [c for c in rep["processes"] if "pytest" in c]  # not the trainer's
        assert sum("sandbox_probe_agent" in c for c in rep["processes"]) == 1  # nor other runs'
    assert accepted == []
    assert not escape.exists() and not (HERE / "escaped.txt").exists()
    assert secret.read_text() == "trainer-side secret"
