"""Stopping `agentrl rollout`: Ctrl-C or a scheduler's SIGTERM keeps what finished.

Each episode's row is written as it finishes, so a stopped sampling run of an hour keeps its
finished episodes instead of losing them all; the command says how many (one line, no
traceback) and exits 130 (Ctrl-C) or 143 (SIGTERM), also when started with SIGINT ignored
(`agentrl rollout ... &` in a script). A run that ends normally rewrites the file in task order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.types import read_jsonl

pytestmark = pytest.mark.timeout(300)


def _start(cache: Path, out: Path, ignore_sigint: bool) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "agentrl", "rollout", "--env", "math/calc-easy-v0"]
    argv += ["--model", "tiny:qwen2", "--n", "2", "--episodes", "5000", "--device", "cpu"]
    argv += ["--concurrency", "4", "--out", str(out)]
    env = os.environ | {"AGENTRL_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    before = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignore_sigint else None
    try:
        return subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


def _rows(out: Path) -> int:
    try:
        return sum(1 for line in out.read_text().splitlines() if line.endswith("}"))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize(
    ("sig", "code", "ignore_sigint"),
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGTERM, 143, True)],
)
def test_a_stopped_rollout_keeps_its_finished_episodes(
    agentrl_cache: Path, tmp_path: Path, sig: signal.Signals, code: int, ignore_sigint: bool
) -> None:
    out = tmp_path / "t.jsonl"
    proc = _start(agentrl_cache, out, ignore_sigint)
    deadline = time.monotonic() + 200
    while _rows(out) < 6 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = _rows(out)
    assert seen >= 6, proc.communicate(timeout=60)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr + stdout, stderr
    said = [ln for ln in stderr.splitlines() if ln.startswith("interrupted: ")]
    assert len(said) == 1, stderr
    kept = list(read_jsonl(out))  # every line a whole row
    assert int(said[0].split()[1]) == len(kept) >= seen
    assert said[0].endswith(f"their rows are in {out}, in the order they finished")
    assert all(t.metadata["tokenizer"] and "scored" in t.metadata for t in kept)


def test_a_finished_rollout_is_in_task_order(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(agentrl_cache))
    out = tmp_path / "t.jsonl"
    argv = ["rollout", "--env", "math/calc-easy-v0", "--model", "tiny:qwen2", "--n", "2"]
    argv += ["--episodes", "6", "--concurrency", "12", "--out", str(out), "--device", "cpu"]
    assert main(argv) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(r["metadata"]["seed"], r["metadata"]["sample"]) for r in got]
    assert keys == [(s, k) for s in range(6) for k in range(2)]
