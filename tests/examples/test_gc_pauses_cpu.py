"""`benchmarks/diagnostics/gc_pauses.py` runs (one compiled pass), and its two measurements are what they
claim: the boundary froze the compiled heap, and the pass after it walks almost nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark script's CPU smoke: CI's slow stage (pyproject)
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "diagnostics" / "gc_pauses.py"


@pytest.mark.timeout(600)
def test_gc_pauses_smoke(tmp_path: Path) -> None:
    out = tmp_path / "gc.json"
    args = ["--passes", "1", "--reps", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=540)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["objects_frozen"] > 10_000  # the compiled model's heap went to the permanent one
    assert r["objects_walked_after_boundary"] < r["objects_walked_python_schedule"] / 10
