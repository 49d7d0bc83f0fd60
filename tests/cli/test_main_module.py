"""`python -m agentrl` under multiprocessing's spawn: a spawned child (vLLM's engine core on a
GPU, `vllm_platform.start_method`) re-imports the parent's main module as ``__mp_main__``
(`multiprocessing.spawn._fixup_main_from_name`, which is `runpy.run_module`); without the
``__main__`` guard that import ran the CLI a second time inside the child."""

from __future__ import annotations

import subprocess
import sys


def test_reimport_as_mp_main_does_not_run_the_cli() -> None:
    code = (
        "import runpy\n"
        "runpy.run_module('agentrl.__main__', run_name='__mp_main__', alter_sys=True)\n"
        "print('child ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("child ok")
    assert "usage" not in done.stdout + done.stderr  # the CLI never parsed arguments


def test_python_m_agentrl_still_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentrl", "--version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "agentrl" in done.stdout
