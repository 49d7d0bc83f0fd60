"""`benchmarks/gpu_update_mfu.py` still runs, in its CPU smoke mode (tiny model, eager), so
the one GPU run it exists for is not lost to a broken script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark script's CPU smoke: CI's slow stage (pyproject)
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_update_mfu.py"


def test_update_mfu_smoke_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "mfu.json"
    args = ["--device", "cpu", "--shape", "tiny", "--vocab", "1024", "--rows", "8", "--reps"]
    args += ["1", "--no-compile", "--json", str(out)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "error" not in result and result["rows"] == 8 and result["flops"] > 0
    base = result["variants"]["baseline"]["warmup_metrics"]
    for name, r in result["variants"].items():
        assert not r["errors"], (name, r["errors"])
        assert r["update_s_mean"] > 0 and r["speedup_vs_baseline"] > 0
        # Each timed update records the process's CPU and run-queue time (Linux schedstat).
        assert len(r["diag"]) == len(r["update_s"]) and r["diag"][0]["host/cpu_ms"] > 0
        split = r["slow_vs_fast"]
        assert split["slow"]["updates"] + split["fast"]["updates"] == len(r["update_s"])
        for key in ("entropy", "grad_norm"):  # same weights, same batch: same values
            assert abs(r["warmup_metrics"][key] - base[key]) < 1e-4, (name, key)
    assert len(result["variants"]) == 9 and base["grad_norm"] > 0
