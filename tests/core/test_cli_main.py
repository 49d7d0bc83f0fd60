import subprocess
import sys

import pytest


def test_help_lists_only_working_commands():
    out = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "envs" in out.stdout and "config" in out.stdout


@pytest.mark.parametrize("module", ["agentrl.cli", "agentrl"])  # python -m agentrl too
def test_config_show_names_bad_key(module):
    out = subprocess.run(
        [sys.executable, "-m", module, "config", "show", "rollout.nn=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "rollout.nn: unknown key" in out.stderr
