import subprocess
import sys


def test_help_lists_only_working_commands():
    out = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "envs" in out.stdout and "config" in out.stdout


def test_config_show_names_bad_key():
    out = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "config", "show", "rollout.nn=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "rollout.nn: unknown key" in out.stderr


def test_python_dash_m_agentrl_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "agentrl", "config", "show", "rollout.nn=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "rollout.nn: unknown key" in out.stderr
