"""The smaller first-hour traps (issue 42, part 2, item 7), each run as a user types it.

`--version`; `--config` with a typo names the nearest recipe; `engine.kind=vllm` without
vLLM fails at config load; a syntax error in `--env-module` and a hub id without network are
one line each; `export` on a checkpoint folder hints `--step`; the README names `step_N/hf/`;
a run's step lines stay whole in a log file (no 80-column wrap).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from agentrl import __version__

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentrl {__version__}"


def test_missing_config_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", "configs/smollm2-calc-cpu.yml"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "no such config file; did you mean configs/smollm2-calc-cpu.yaml?" in line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_missing_fails_at_config_load(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "engine.kind=vllm"]) == 2  # before any model loads
    line = one_line(capsys.readouterr().err)
    assert "engine.kind: vllm is not installed here" in line and "engine.kind=hf" in line


def test_env_module_syntax_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "my_env.py"
    bad.write_text("from agentrl.envs import register\ndef f(:\n    pass\n")
    for cmd in (["train"], ["envs", "check", "x/y-v0"], ["doctor"]):
        code = main([*cmd, "--env-module", str(bad)])
        out = capsys.readouterr()
        assert code == 2, out
        line = one_line(out.err or out.out)
        assert f"{bad}:2:" in line and "syntax error" in line


def test_hub_id_without_network_is_one_line(tmp_path: Path) -> None:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "agentrl", "rollout", "--env", "math/calc-v0"]
    cmd += ["--model", "someorg/no-such-model", "--out", str(tmp_path / "t.jsonl")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert "model.path: 'someorg/no-such-model' is not a folder here" in line


def test_export_on_a_checkpoint_folder_hints_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_000020"
    (ckpt / "hf").mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"")
    (run / "config.yaml").write_text("{}\n")
    assert main(["export", str(ckpt), "--out", str(tmp_path / "x")]) == 2
    line = one_line(capsys.readouterr().out)
    assert f"agentrl export {run} --step 20 --out DIR" in line and "hf/" in line
    assert main(["export", str(run / "checkpoints"), "--out", str(tmp_path / "x")]) == 2
    assert f"pass the run folder: {run}" in capsys.readouterr().out


def test_readme_names_the_hf_folder_of_a_checkpoint() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "`checkpoints/step_N/hf/`" in text
    assert "each kept checkpoint and `final/` is an HF directory" not in text


def test_step_lines_are_whole_in_a_log_file(tmp_path: Path) -> None:
    """stdout to a file (not a terminal): rich used to wrap each step line at 80 columns."""
    from agentrl.trainer.logger import MetricsLogger

    log = tmp_path / "train.log"
    code = (
        "from pathlib import Path; from agentrl.trainer.logger import MetricsLogger\n"
        f"m = MetricsLogger(Path({str(tmp_path)!r}), tensorboard=False, wandb=False, config={{}})\n"
        "m.log(7, {'reward/mean': 0.123456, 'success_rate': 0.5, 'response_length/mean': 1234.5,"
        " 'kl': 0.000123, 'entropy': 2.345678, 'time/step': 12.3456})\n"
    )
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, timeout=120)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, lines
    assert lines[0].startswith("step 7 ") and lines[0].endswith("time/step=12.35")
    assert MetricsLogger  # the logger the trainer prints its step lines with
