"""The single-file GRPO reference runs end to end with tiny budgets (cleanrl-style smoke test)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "examples" / "grpo_single_file.py"


def test_grpo_single_file_smoke() -> None:
    args = ["--total-steps", "2", "--prompts-per-step", "2", "--group-size", "2"]
    args += [
        "--max-new-tokens",
        "12",
        "--sft-steps",
        "2",
        "--sft-demos",
        "4",
        "--eval-episodes",
        "2",
    ]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    steps = re.findall(r"^step (\d+) reward ([\d.]+) success", out.stdout, re.M)
    assert [s for s, _ in steps] == ["1", "2"]
    assert "warm start: 2 SFT steps" in out.stdout
    assert "eval before: success" in out.stdout and "eval after: success" in out.stdout


def test_grpo_single_file_imports_no_trainer() -> None:
    """A reference implementation: only agentrl's env and tiny-model builder are used."""
    imports = re.findall(r"^(?:from|import) (agentrl[\w.]*)", SCRIPT.read_text(), re.M)
    assert set(imports) <= {"agentrl", "agentrl.models.tiny", "agentrl.types"}
