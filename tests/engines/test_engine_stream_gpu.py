"""The hf engines' own CUDA stream (`engines/_stream.py`): ordered where it must be, exact.

What could go wrong once the engine decodes on a stream of its own while the trainer works on
the default stream: a weight copy reading the caller's tensors before the caller's kernels
wrote them, or decode results changing when another thread keeps the GPU busy. Both are
checked against a reference computed with nothing else running.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

import pytest
import torch
from engine_helpers import gpu_model

from agentrl.engines import SamplingParams
from agentrl.engines.build import make_hf_engine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GREEDY = SamplingParams(max_new_tokens=48, temperature=0.0)


def _prompts(n: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(7)
    return [torch.randint(3, 1024, (int(10 + 5 * i),), generator=gen).tolist() for i in range(n)]


def _run(engine: Any, prompts: list[list[int]]) -> list[list[int]]:
    async def body() -> list[list[int]]:
        try:
            return [r.token_ids for r in await engine.generate_batch(prompts, GREEDY)]
        finally:
            await engine.close()

    return asyncio.run(asyncio.wait_for(body(), timeout=300))


def _busy_matrix() -> torch.Tensor:
    return torch.randn(4096, 4096, device="cuda", dtype=torch.float32)


@pytest.mark.parametrize("fast", [True, False])
def test_engine_runs_on_its_own_high_priority_stream(fast: bool) -> None:
    engine = make_hf_engine(gpu_model("qwen2", torch.float32), [], fast=fast, max_batch_size=8)
    stream = engine._dev.stream
    assert stream is not None and stream != torch.cuda.default_stream()
    assert stream.priority == torch.cuda.Stream.priority_range()[1]  # the highest
    shared = make_hf_engine(
        gpu_model("qwen2", torch.float32), [], fast=fast, max_batch_size=8, own_stream=False
    )
    assert shared._dev.stream is None


@pytest.mark.parametrize("fast", [True, False])
def test_decode_beside_a_busy_default_stream_is_exact(fast: bool) -> None:
    """Another thread keeps the default stream full of matmuls while the engine decodes:
    the greedy tokens equal those of a quiet GPU."""
    prompts = _prompts(6)
    quiet = _run(make_hf_engine(gpu_model("qwen2", torch.float32), [], fast=fast), prompts)
    engine = make_hf_engine(gpu_model("qwen2", torch.float32), [], fast=fast)
    # Graphs captured first, as training does (`engine.hf.precapture`): while a capture runs,
    # CUDA refuses another thread's device-wide sync and torch its CUDA RNG draws.
    engine.precapture(sampling=[GREEDY])
    stop = threading.Event()
    a = _busy_matrix()

    def busy() -> None:
        nonlocal a
        while not stop.is_set():
            for _ in range(8):
                a = torch.tanh(a @ a)
            # Its own stream's sync, as a trainer's `.item()` does: a device-wide sync while
            # the engine captures a graph is refused by CUDA and breaks the capture.
            torch.cuda.current_stream().synchronize()

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    try:
        loud = _run(engine, prompts)
    finally:
        stop.set()
        worker.join(timeout=60)
    assert loud == quiet


@pytest.mark.parametrize("fast", [True, False])
def test_weight_update_waits_for_the_callers_kernels(fast: bool) -> None:
    """The new weights are still being computed on the caller's stream (behind a queue of
    matmuls) when `update_weights` is called: the copy must wait for them, and the engine's
    output must equal a model that holds those weights from the start."""
    target = gpu_model("qwen2", torch.float32)
    with torch.no_grad():
        for p in target.parameters():
            p.mul_(0.9).add_(0.01)
    want = _run(make_hf_engine(copy.deepcopy(target), [], fast=fast), _prompts(4))
    engine = make_hf_engine(gpu_model("qwen2", torch.float32), [], fast=fast)
    assert _run(engine, _prompts(4)) != want  # the update has something to change
    engine = make_hf_engine(gpu_model("qwen2", torch.float32), [], fast=fast)
    with torch.no_grad():
        a = _busy_matrix()
        for _ in range(40):  # ~tens of ms queued ahead of the new values
            a = torch.tanh(a @ a)
        zero = a.sum() * 0.0
        new = [(n, t + zero) for n, t in target.state_dict().items()]
        engine.update_weights(new)
        del new  # the caller frees its tensors at once: their memory must not be reused early
        _ = [torch.full((1024, 1024), float("nan"), device="cuda") for _ in range(64)]
    assert _run(engine, _prompts(4)) == want
