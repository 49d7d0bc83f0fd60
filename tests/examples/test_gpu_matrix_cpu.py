"""`benchmarks/gpu_matrix.py` on CPU with the tiny model: two matrix cells trained at once as
`agentrl train` subprocesses (one RL step, a few eval episodes), each row written with the
trainer's own untouched / after-SFT / after-RL held-out numbers, the table and curves too."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TINY = [
    "trainer.steps=1", "data.batch_size=2", "rollout.n=2", "data.eval_episodes=2",
    "sft.steps=2", "sft.demos=4", "sft.batch_size=2", "trainer.mini_batch_size=4",
    "trainer.micro_batch_size=2", "trainer.logprob_micro_batch_size=2",
    "engine.max_batch_size=4", "rollout.concurrency=4", "trainer.eval_every=0",
    "sampling.max_new_tokens=16", "trainer.cpu_threads=1",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_cells_run_at_once_and_report(tiny_model_dir: Path, tmp_path: Path) -> None:
    out, runs = tmp_path / "out", tmp_path / "runs"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_matrix.py"), "--device", "cpu"]
    cmd += ["--cells", "smollm2-calc", "gemma3-rg", "--out", str(out), "--run-root", str(runs)]
    cmd += ["--cache-dir", str(tiny_model_dir.parent), "--budget-s", "500", "--set"]
    cmd += ["model.path=tiny:qwen2", *TINY]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=580, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["cell"]: r for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["gemma3-rg", "smollm2-calc"]
    for row in rows.values():
        assert row["status"] == "ok" and row["exit_code"] == 0 and row["rl_steps"] == 1
        for key in ("untouched", "after_sft", "after_rl", "tool_calls_after_rl"):
            assert 0.0 <= row[key] <= (1.0 if "tool" not in key else 10.0), key
        assert row["eval_episodes"] == 2 and row["wall_s"] > 0
        assert (
            "agentrl train --config" in row["command"] and "trainer.max_wall_s=" in row["command"]
        )
    assert rows["smollm2-calc"]["env"] == "math/calc-mul-v0"
    table = (out / "table.md").read_text()
    assert "| smollm2-calc |" in table and "| gemma3-rg |" in table
    assert (out / "curves_smollm2.png").stat().st_size > 0
    assert (out / "curves_gemma3.png").stat().st_size > 0
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"smollm2-calc/eval.jsonl", "smollm2-calc/train.log"} <= names
    assert len(list(out.iterdir())) <= 8  # what the device machine brings back


def test_a_bad_cell_is_a_row_not_an_abort(tmp_path: Path) -> None:
    """A cell whose config does not load is reported (skipped, with the reason) and the run
    still writes its table; nothing is started for it."""
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "tiny-broken.yaml").write_text("trainer:\n  stpes: 3\n")
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_matrix.py"), "--config-dir", str(cells)]
    cmd += ["--out", str(out), "--run-root", str(tmp_path / "runs"), "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = map(json.loads, (out / "rows.jsonl").read_text().splitlines())
    assert row["status"] == "skipped" and "stpes" in row["reason"]
    assert "| tiny-broken |" in (out / "table.md").read_text()


def test_a_cell_crowded_out_at_start_runs_again_alone(tmp_path: Path) -> None:
    """A cell that died of CUDA OOM before any RL step while cells ran at once (what the lent
    H100 did to all but one of nine) is retried once, alone; a late OOM, one after RL steps,
    a retried cell or a cell that ran alone is a plain failure."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_matrix

    def finished(message: str, crowded: bool = True, steps: int = 0) -> gpu_matrix.Cell:
        run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run_dir.mkdir()
        if steps:
            (run_dir / "metrics.jsonl").write_text(
                json.dumps({"step": 1, "reward/mean": 0.5}) + "\n"
            )
        cell = gpu_matrix.Cell("c", tmp_path / "c.yaml", [], run_dir=run_dir)
        cell.log, cell.crowded = run_dir / "c.log", crowded
        with cell.log.open("wb") as log:
            cell.proc = subprocess.Popen(
                [sys.executable, "-c", f"import sys; print({message!r}); sys.exit(1)"],
                stdout=log,
            )
        cell.proc.wait(60)
        return cell

    oom = "RuntimeError: CUDA error: out of memory"
    assert gpu_matrix.crowded_out(finished(oom))
    assert not gpu_matrix.crowded_out(finished(oom, crowded=False))
    assert not gpu_matrix.crowded_out(finished(oom, steps=1))
    assert not gpu_matrix.crowded_out(finished("ValueError: a bad config"))
    retried = finished(oom)
    retried.retried = True
    assert not gpu_matrix.crowded_out(retried)


def test_a_variant_is_its_own_cell_beside_its_recipe(tmp_path: Path) -> None:
    """`--variant 'CELL+TAG KEY=VALUE ...'`: the recipe again with overrides, named, with its
    own run folder and overrides after the shared ones (an A/B in one wave); a malformed one is
    one clear error naming it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_matrix

    args = gpu_matrix.parse(
        ["--cells", "gemma3-code", "--run-root", str(tmp_path), "--set", "sft.steps=4",
         "--variant", "gemma3-code+lr2e-6 optim.lr=2e-6 sft.steps=12"]
    )  # fmt: skip
    plain, variant = gpu_matrix.select(args)
    assert (plain.name, variant.name) == ("gemma3-code", "gemma3-code+lr2e-6")
    assert variant.config == plain.config and variant.model == "gemma3"
    assert variant.run_dir == tmp_path / "gemma3-code+lr2e-6" != plain.run_dir
    assert variant.overrides[-2:] == ["optim.lr=2e-6", "sft.steps=12"]
    assert "optim.lr=2e-6" not in plain.overrides and "sft.steps=4" in variant.overrides
    for bad in (
        "gemma3-code optim.lr=1",
        "nosuch+x optim.lr=1",
        "gemma3-code+x",
        "gemma3-code+x lr",
    ):
        with pytest.raises(SystemExit, match="--variant"):
            gpu_matrix.select(gpu_matrix.parse(["--cells", "none", "--variant", bad]))


def test_a_failed_cell_names_its_exception(tmp_path: Path) -> None:
    """A cell whose trainer dies is a `failed` row whose reason is the exception line of its
    log (the H200 wave of session 26 printed `failed: ` for a cell missing `bm25s`)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_matrix

    cell = gpu_matrix.Cell("c", tmp_path / "c.yaml", [], run_dir=tmp_path / "run")
    cell.log = tmp_path / "c.log"
    crash = "import bm25s_that_is_not_installed\nprint('after')"
    with cell.log.open("wb") as log:
        cell.proc = subprocess.Popen([sys.executable, "-c", crash], stderr=log)
    cell.proc.wait(60)
    row = gpu_matrix.cell_row(cell, gpu_matrix.parse(["--run-root", str(tmp_path)]))
    assert row["status"] == "failed" and row["exit_code"] == 1
    assert row["reason"] == "ModuleNotFoundError: No module named 'bm25s_that_is_not_installed'"
