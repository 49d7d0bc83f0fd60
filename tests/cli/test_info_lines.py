"""The `agentrl` CLI prints its loggers' INFO lines (which path vLLM took: the native RL API
or the fallback) on stderr. Python alone prints only warnings, so the vLLM adapter's one line
never reached a user of `agentrl train` (seen on the H100 run of 2026-12-07)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, sys
from agentrl.cli import show_info_lines
show_info_lines()
show_info_lines()  # idempotent: one handler, one line
logging.getLogger("agentrl.engines.vllm").info("vLLM %s: %s", "0.0", "fallback")
logging.getLogger("agentrl.engines.vllm").debug("not shown")
print("stdout stays clean")
"""


def test_cli_shows_agentrl_info_lines_once_on_stderr() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stderr.splitlines() == ["agentrl: vLLM 0.0: fallback"], out.stderr
    assert out.stdout == "stdout stays clean\n"


def test_a_program_with_its_own_logging_keeps_it() -> None:
    script = "import logging; logging.basicConfig(format='own %(message)s')\n" + SCRIPT
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert "agentrl: " not in out.stderr, out.stderr
