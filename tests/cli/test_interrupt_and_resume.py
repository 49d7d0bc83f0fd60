"""Ctrl-C and `--resume` as a user meets them (issue 42, part 2, items 4 and 5).

Ctrl-C during `agentrl train`: one line naming the step and `--resume`, a checkpoint when the
step had finished, exit 130, no traceback. `--resume`: the run's own `config.yaml` with the
command line's overrides on top (not the recipe's values), every differing key listed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from trainer_synth import train_overrides  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def tiny_args(cache: Path, out: Path, **extra: object) -> list[str]:
    """`trainer_synth.train_overrides` (tiny model, 2 prompts x 2 samples, no SFT) with no
    evals or checkpoints between steps."""
    return train_overrides(cache, out, trainer__eval_every=0, trainer__save_every=0, **extra)


def _long_train(cache: Path, out: Path) -> subprocess.Popen[str]:
    """`python -m agentrl train` for 1000 tiny steps (stopped by a signal long before),
    single-threaded, its output piped as text."""
    argv = ["-m", "agentrl", "train", *tiny_args(cache, out, trainer__steps=1000)]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_during_train_is_one_line_and_a_checkpoint(
    agentrl_cache: Path, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Ctrl-C, and SIGTERM (a scheduler's stop) the same way with its own exit code."""
    out = tmp_path / "run"
    proc = _long_train(agentrl_cache, out)
    assert proc.stdout is not None
    for line in proc.stdout:  # after the first step line
        if line.startswith("step 1 "):
            proc.send_signal(sig)
            break
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr + stdout
    said = [ln for ln in stderr.splitlines() if ln.startswith("interrupted at step")]
    assert len(said) == 1, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "Loading weights" not in ln]
    assert len(lines) <= 3, stderr
    step = int(said[0].split()[3].rstrip(";"))
    assert step >= 1
    # A finished step is checkpointed (the signal may also land mid-step: then the step is
    # not done and there is nothing new to save; this run saves no checkpoint on its own).
    if "resume with --resume" in said[0]:
        assert said[0].endswith("resume with --resume")
        assert (out / "checkpoints" / "latest").read_text().strip() == f"step_{step:06d}"
    else:
        assert "no checkpoint yet" in said[0] and not (out / "checkpoints").exists()


def test_sigterm_stops_a_run_started_with_ctrl_c_ignored(
    agentrl_cache: Path, tmp_path: Path
) -> None:
    """`agentrl train ... &` in a script (a batch job): the shell starts it with SIGINT
    ignored. Ctrl-C stays ignored (the run goes on), and a scheduler's SIGTERM still ends it
    as above: one line, exit 143. (The SIGTERM handler forwarded to SIGINT's handler, found
    SIG_IGN, and the stop was lost: the run trained on.)"""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec, as from sh
    try:
        proc = _long_train(agentrl_cache, tmp_path / "run")
    finally:
        signal.signal(signal.SIGINT, before)
    assert proc.stdout is not None
    steps = []
    for line in proc.stdout:
        if line.startswith("step "):
            steps.append(int(line.split()[1]))
            if len(steps) == 1:
                proc.send_signal(signal.SIGINT)  # ignored
            elif len(steps) == 3:  # two more steps came after it
                proc.send_signal(signal.SIGTERM)
                break
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr + stdout
    said = [ln for ln in stderr.splitlines() if ln.startswith("interrupted at step")]
    assert len(said) == 1 and int(said[0].split()[3].rstrip(";")) >= 3, stderr


def test_resume_uses_the_runs_own_config(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("trainer:\n  steps: 30\nsampling:\n  temperature: 1.0\n")
    out = tmp_path / "run"
    first = tiny_args(agentrl_cache, out, trainer__steps=1, sampling__temperature=0.7)
    assert main(["train", "--config", str(recipe), *first]) == 0
    capsys.readouterr()
    # The user resumes with the recipe but without the first run's overrides, asking for 2 steps.
    again = ["--config", str(recipe), "--resume", f"trainer.out_dir={out}", "trainer.steps=2"]
    assert main(["train", *again]) == 0
    printed = capsys.readouterr().out
    assert "--resume: the run's own config" in printed
    assert "  trainer.steps: 1 -> 2" in printed
    assert "not applied from" in printed and "sampling.temperature" in printed
    saved = (out / "config.yaml").read_text()
    assert "temperature: 0.7" in saved and "steps: 2" in saved  # not the recipe's 30 / 1.0
    steps = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert f"final model: {out / 'final'}" in printed
