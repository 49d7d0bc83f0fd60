"""The hf engine's admission window and its own worker thread (CPU, tiny qwen2).

A rollout's episodes reach `generate()` a little apart (each first awaits `env.areset` in
asyncio's default executor). The idle engine waits while requests keep arriving, so they
share one prefill instead of the first starting alone and the rest joining step by step;
and its steps never queue behind env work in the default executor.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest
from engine_helpers import TEXTS, run_async, with_engine

from agentrl.config import FastHFTuning
from agentrl.engines import HFEngine, SamplingParams
from agentrl.engines.hf_fast import FastHFEngine

PARAMS = SamplingParams(max_new_tokens=4, temperature=0.0)


async def _staggered(engine: FastHFEngine, prompts: list[list[int]], gap_s: float) -> Any:
    """Each request a little after the previous one, as episodes arrive after `areset`."""

    async def one(i: int, ids: list[int]) -> Any:
        await asyncio.sleep(i * gap_s)
        return await engine.generate(ids, PARAMS)

    return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))


def _prompts(tok: Any, n: int) -> list[list[int]]:
    return [tok(TEXTS[i % len(TEXTS)] + f" {i}")["input_ids"] for i in range(n)]


def test_requests_arriving_apart_share_one_prefill(tiny: Any) -> None:
    model, tok = tiny
    prompts = _prompts(tok, 6)

    async def body(engine: FastHFEngine) -> Any:
        out = await _staggered(engine, prompts, gap_s=0.001)
        return out, dict(engine.stats)

    out, stats = run_async(
        with_engine(FastHFEngine, model, tok, body, tuning=FastHFTuning(admission_window_s=0.01))
    )
    assert all(r.finish_reason in ("stop", "length") for r in out)
    assert stats["prefill_calls"] == 1
    # Same tokens as with no window at all (the window only changes who shares a step).
    base, _ = run_async(
        with_engine(FastHFEngine, model, tok, body, tuning=FastHFTuning(admission_window_s=0.0))
    )
    assert [r.token_ids for r in out] == [r.token_ids for r in base]


def test_steps_do_not_queue_behind_the_default_executor(tiny: Any) -> None:
    """Every default-executor thread is blocked until generate() returns: the engine, on its
    own thread, still finishes (a shared executor would deadlock; run_async times out)."""
    model, tok = tiny
    release = threading.Event()

    async def body(engine: FastHFEngine) -> Any:
        workers = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor size
        blockers = [asyncio.to_thread(release.wait, 30) for _ in range(workers + 4)]
        tasks = [asyncio.ensure_future(b) for b in blockers]
        await asyncio.sleep(0.05)  # the default executor is now saturated
        try:
            return await engine.generate(_prompts(tok, 1)[0], PARAMS)
        finally:
            release.set()
            await asyncio.gather(*tasks)

    out = run_async(with_engine(FastHFEngine, model, tok, body))
    assert out.finish_reason in ("stop", "length") and out.token_ids


@pytest.mark.parametrize("engine_cls", [FastHFEngine, HFEngine])
def test_join_every_batches_joins_and_keeps_tokens(tiny: Any, engine_cls: Any) -> None:
    """`join_every=4`: while rows decode, a waiting request joins only after 3 more decode
    steps: every prefill while rows run comes >= 3 decode steps after the previous one (so
    requests arriving one by one share prefill calls). Greedy tokens are those of
    `join_every=1` (joining later changes who shares a step, not what a row computes)."""
    model, tok = tiny
    prompts = _prompts(tok, 8)
    params = SamplingParams(max_new_tokens=24, temperature=0.0)

    async def body(engine: Any) -> Any:
        marks: list[tuple[float, int]] = []  # (decode steps so far, running rows) per prefill
        step = engine._step

        def spy(admitted: list[Any]) -> Any:
            if admitted:
                marks.append((engine.stats["decode_steps"], len(engine._rows)))
            return step(admitted)

        engine._step = spy

        async def one(i: int, ids: list[int]) -> Any:
            await asyncio.sleep(i * 0.004)
            return await engine.generate(ids, params)

        out = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        return [r.token_ids for r in out], marks

    one, four = (FastHFTuning(admission_window_s=0.0, join_every=n) for n in (1, 4))
    base, _ = run_async(with_engine(engine_cls, model, tok, body, tuning=one))
    out, marks = run_async(with_engine(engine_cls, model, tok, body, tuning=four))
    assert out == base
    for (before, _), (after, running) in zip(marks, marks[1:], strict=False):
        assert running == 0 or after - before >= 3, marks


@pytest.mark.parametrize("engine_cls", [FastHFEngine, HFEngine])
def test_on_admit_runs_once_when_a_request_takes_a_slot(tiny: Any, engine_cls: Any) -> None:
    """`max_batch_size=1`: each request's `on_admit` (the "admission" feature, which the
    episode clock uses to leave out the wait for a slot) runs once, in arrival order, when the
    slot is free; one that raises fails its own request only."""
    model, tok = tiny
    prompts = _prompts(tok, 4)

    async def body(engine: Any) -> Any:
        admitted: list[tuple[int, int]] = []  # (request, rows running when it was admitted)

        def params(i: int) -> SamplingParams:
            def on_admit() -> None:
                if i == 2:
                    raise RuntimeError("callback bug")
                admitted.append((i, len(engine._rows)))

            return SamplingParams(max_new_tokens=6, temperature=0.0, on_admit=on_admit)

        out = await asyncio.gather(*(engine.generate(p, params(i)) for i, p in enumerate(prompts)))
        return out, admitted

    assert "admission" in engine_cls.features
    out, admitted = run_async(with_engine(engine_cls, model, tok, body, max_batch_size=1))
    assert admitted == [(0, 0), (1, 0), (3, 0)]
    assert out[2].finish_reason == "error" and "on_admit: RuntimeError" in (out[2].error or "")
    assert all(out[i].finish_reason in ("stop", "length") for i in (0, 1, 3))
