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
    """Also: a light command does not import the trainer's stack (transformers, the assembly's
    builders): each CLI call would pay seconds for it (`-X importtime` lists every import)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "config", "show", "rollout.nn=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "rollout.nn: unknown key" in out.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert "agentrl.envs" in imported  # the env registry is read (a real `config show`)
    assert not imported & {"transformers", "agentrl.assembly.build", "agentrl.trainer"}
