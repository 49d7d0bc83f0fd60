"""The GPU benchmark scripts still run, on CPU with a tiny model (their smoke modes), so a
change never leaves `benchmarks/gpu_run_all.sh` broken until the next GPU session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark script's CPU smoke: CI's slow stage (pyproject)
BENCH = Path(__file__).parents[2] / "benchmarks"


def _run(script: str, args: list[str], out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_gpu_grpo_agentrl_half_on_cpu(tmp_path: Path) -> None:
    args = ["--shape", "tiny", "--vocab", "647", "--device", "cpu", "--part", "agentrl"]
    args += ["--steps", "1", "--prompts", "2", "--n", "2", "--sft-steps", "2", "--packing"]
    args += ["--profile", "--engine-extra", "fast=true", "--compare-update-paths", "1"]
    result = _run("gpu_grpo.py", args, tmp_path / "grpo.json")
    assert "agentrl_error" not in result
    out = result["agentrl"]
    assert out["engine"] == "FastHFEngine"
    assert out["e2e_sampled_tok_s"] > 0 and out["sampled_tokens_per_step"] > 0
    step = out["steps"][0]
    # Executed FLOPs never exceed the 6N-on-every-token count (the lm-head runs on fewer rows).
    assert 0 < step["flops"] <= step["flops_6n_all"]
    assert step["logit_tokens"] <= step["tokens"]
    assert out["profile_update"]["top_device_ops"]
    paths = out["update_paths"]  # the update's variants timed (and profiled) on one batch
    for name in ("before", "materialized", "fused"):
        assert paths[name]["update_s_mean"] > 0 and paths[name]["speedup_vs_before"] > 0
        assert paths[name]["profile"]["top_device_ops"]


def test_gpu_prefill_attention_on_cpu(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--shape", "qwen2-small", "--calls", "2"]
    result = _run("diagnostics/gpu_prefill_attention.py", args, tmp_path / "prefill.json")
    for name in ("torch_default", "agentrl_pinned"):
        assert len(result[name]["fresh_ms"]) == 2
    assert result["speedup_fresh_shape_ms_median"] > 0


def test_gpu_grpo_staleness_sweep_on_cpu(tmp_path: Path) -> None:
    """`--max-staleness 0 1:process`: the synchronous loop and pipelined steps with the rollout
    in a child process, on the multi-turn workload with tool latency (its env from a module,
    which the child imports): throughput ratio and staleness (no NVML on CPU)."""
    args = ["--shape", "tiny", "--vocab", "647", "--device", "cpu", "--steps", "2"]
    args += ["--prompts", "2", "--n", "2", "--sft-steps", "2", "--engine", "hf"]
    sampled = "0,bench.stack_sample,trainer.gc_every=0"  # a config override too
    args += ["--max-staleness", "0", "1:process", "0", sampled]
    args += ["--tool-latency", "0.01", "0.03", "--warmup", "1"]
    out = _run("gpu_grpo.py", args, tmp_path / "sweep.json")["async"]
    assert set(out["runs"]) == {"0", "1:process", "0#2", sampled}  # a repeat: its own entry
    assert set(out["ratio_e2e_vs_sync_mean"]) == set(out["runs"]) and len(out["sync_tok_s"]) == 3
    for run in out["runs"].values():
        assert "error" not in run, run
        assert run["e2e_sampled_tok_s"] > 0 and len(run["step_s"]) == 2
        stale = [s for s in run["staleness"]["async/staleness_max"] if s is not None]
        assert (not stale) if run["k"] == 0 else max(stale) <= 1
    assert out["runs"]["1:process"]["producer"] == "process"
    assert out["ratio_e2e_vs_first"]["0"] == 1.0
    later = [out["runs"][k]["e2e_sampled_tok_s"] for k in ("0#2", sampled)]
    assert out["sync_tok_s_after_first_mode"] == later
    assert all(r["gil_probe_samples"] > 0 for r in out["runs"].values())
    stacks = out["runs"][sampled]["stacks"]  # the stack sampler saw the trainer's thread
    assert stacks["samples"] > 0 and "MainThread" in stacks["threads"]
    assert not out["runs"]["0"]["stacks"]
    assert out["runs"]["0"]["host_cpu_ms"] > 0  # the timed steps' CPU time (schedstat)
    assert out["runs"]["0"]["gc0_count"] >= 0 and "gc2_max_ms" in out["runs"]["0"]


def test_tool_threads_on_cpu(tmp_path: Path) -> None:
    """`tool_threads.py`: kept tool workers against a thread per call, beside a busy thread."""
    args = ["--calls", "40", "--concurrency", "10", "--tool-ms", "1"]
    out = _run("diagnostics/tool_threads.py", args, tmp_path / "tools.json")
    assert set(out["variants"]) == {"thread_per_call", "kept_workers"}
    assert out["wall_ratio_old_over_new"] > 0


def test_host_build_on_cpu(tmp_path: Path) -> None:
    """`host_build.py`: the batch and prefill builds against their per-row peers."""
    args = ["--episodes", "16", "--rows", "8", "--reps", "1"]
    out = _run("diagnostics/host_build.py", args, tmp_path / "host.json")
    assert len(out) == 4 and all(v["alone_ms"] > 0 for v in out.values())


def test_gpu_async_learning_on_cpu(tmp_path: Path) -> None:
    sets = ["trainer.steps=2", "sft.steps=2", "data.eval_episodes=4", "data.batch_size=2"]
    sets += ["rollout.n=2", "trainer.mini_batch_size=4", "trainer.device=cpu"]
    config = BENCH.parent / "configs" / "quickstart-cpu.yaml"
    args = ["--config", str(config), "--set", *sets, "--eval-every", "1", "--out", str(tmp_path)]
    args += ["--producer", "process", "--modes", "sync=0", "dec1=1:algorithm.off_policy=decoupled"]
    args += ["--parallel", "2"]
    result = _run("gpu_async_learning.py", args, tmp_path / "learning.json")
    assert [(r["k"], "error" in r) for r in result["runs"]] == [(0, False), (1, False)]
    assert [r["producer"] for r in result["runs"]] == ["-", "process"]
    assert result["runs"][1]["overrides"] == ["algorithm.off_policy=decoupled"]
    for r in result["runs"]:
        assert [p["step"] for p in r["curve"]] == [0, 1, 2]
    assert set(result["gap_points_vs_sync"]) == {"dec1_seed0"}
    assert result["png"] is None or Path(result["png"]).stat().st_size > 0
