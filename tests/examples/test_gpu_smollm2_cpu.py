"""benchmarks/gpu_smollm2.py (the real-model H200 pipeline) runs every part on CPU with the
tiny model: untouched eval with and without the tool, format SFT + GRPO interrupted by its
time budget and resumed from the checkpoint, the exported final/ evaluated fresh, and the
engine-vs-generate throughput; every output file the lead collects from $OUT exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark script's CPU smoke: CI's slow stage (pyproject)
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_smollm2.py"
# the tests' shared model cache (conftest.CACHE): the script's default is runs/ in the checkout
CACHE = os.environ.get("AGENTRL_CACHE", str(Path.home() / ".cache" / "agentrl"))
SMALL = [
    "trainer.steps=2",
    "trainer.save_every=0",
    "trainer.eval_every=1",
    "sft.steps=2",
    "sft.demos=8",
    "data.batch_size=2",
    "rollout.n=2",
    "trainer.mini_batch_size=4",
    "trainer.micro_batch_size=2",
    "trainer.logprob_micro_batch_size=4",
    "engine.max_batch_size=8",
    "rollout.concurrency=8",
    "sampling.max_new_tokens=16",
]


def _run(tmp: Path, part: str, *extra: str) -> dict:
    cmd = [sys.executable, str(SCRIPT), "--part", part, "--device", "cpu", "--cache-dir", CACHE]
    cmd += ["--model", "tiny:qwen2", "--episodes", "3", "--out", str(tmp / "out")]
    cmd += ["--run-dir", str(tmp / "run"), "--batches", "1,2", "--prompt-len", "16"]
    cmd += ["--new-tokens", "8", *extra, "--set", *SMALL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads((tmp / "out" / f"{part}.json").read_text())


@pytest.mark.timeout(600)
def test_gpu_smollm2_parts_on_cpu(tmp_path: Path) -> None:
    base = _run(tmp_path, "eval_base")
    assert base["base_tool"]["episodes"] == 3 and base["base_notool"]["called_tool_rate"] == 0
    rows = (tmp_path / "out" / "eval_base_tool.jsonl").read_text().splitlines()
    assert [json.loads(r)["seed"] for r in rows] == [1_000_000, 1_000_001, 1_000_002]

    first = _run(tmp_path, "train", "--budget-s", "0")  # SFT, eval, checkpoint, stop
    assert first["done"] is False and first["step"] == 0 and "sft_tool" in first
    second = _run(tmp_path, "train")  # resumes after SFT, finishes GRPO
    assert second["resumed_from_step"] == 0 and second["done"] is True
    assert second["grpo_tool"]["episodes"] == 3
    assert second["curve"]["steps"] == [1, 2]
    out = tmp_path / "out"
    for name in ("reward_curve.png", "eval_sft_tool.jsonl", "eval_grpo_tool.jsonl"):
        assert (out / name).stat().st_size > 0, name
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()

    after = _run(tmp_path, "eval_after")
    assert after["after_tool"]["episodes"] == 3
    bench = _run(tmp_path, "bench")
    assert [r["batch"] for r in bench["throughput"]] == [1, 2]
    assert all(r["engine_tok_s"] > 0 and r["generate_tok_s"] > 0 for r in bench["throughput"])
