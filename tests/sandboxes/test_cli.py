"""``agentrl sandbox run`` through the CLI entry, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

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
