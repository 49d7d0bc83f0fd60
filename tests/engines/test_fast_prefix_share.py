"""FastHFEngine prefill sharing (CPU, float32): identical prompts of one admission are
computed once, and results are the same as with sharing off, token for token."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from engine_helpers import TEXTS, reference_greedy, rescore, run_async, with_engine

from agentrl.config import FastHFTuning
from agentrl.engines import SamplingParams, make_hf_engine
from agentrl.engines._prefix_share import plan_share, prefill_shared
from agentrl.engines._static_model import StaticDecoder
from agentrl.engines.hf_fast import FastHFEngine

PARAMS = [
    SamplingParams(max_new_tokens=12, temperature=0.0),
    SamplingParams(max_new_tokens=12, temperature=1.0, seed=11),
    SamplingParams(max_new_tokens=12, temperature=0.8, top_p=0.9, top_k=20, seed=12),
]


def _seeded(params: SamplingParams, k: int) -> SamplingParams:
    seed = None if params.seed is None else params.seed * 100 + k
    return SamplingParams(
        params.max_new_tokens, params.temperature, params.top_p, params.top_k, seed=seed
    )


def _run_both(model: Any, tok: Any, body: Any, **kw: Any) -> tuple[Any, Any]:
    """`body` on an engine with sharing on and one with it off: (results, stats) each."""

    async def wrapped(engine: FastHFEngine) -> tuple[Any, dict[str, int]]:
        return await body(engine), dict(engine.stats)

    on = run_async(
        with_engine(
            FastHFEngine, model, tok, wrapped, tuning=FastHFTuning(share_prefill=True, **kw)
        )
    )
    off = run_async(
        with_engine(
            FastHFEngine, model, tok, wrapped, tuning=FastHFTuning(share_prefill=False, **kw)
        )
    )
    return on, off


def _assert_same(a: list[Any], b: list[Any]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-6)


def test_plan_share_groups_by_key() -> None:
    plan = plan_share(["a", "b", "a", "c", "b", "a"])
    assert plan.unique == [0, 1, 3]
    assert plan.source == [0, 1, 0, 2, 1, 0]
    assert plan.copies == {0: [2, 5], 1: [4]}


def test_shared_prefill_copies_cache_and_logits(tiny: Any) -> None:
    model, tok = tiny
    a, b = tok.encode(TEXTS[0]), tok.encode(TEXTS[1])
    rows = [(0, 0, a), (1, 0, b), (2, 0, a), (3, 0, a)]
    keys = [tuple(r[2]) for r in rows]
    ref = StaticDecoder(model, slots=4, max_len=64)
    dec = StaticDecoder(model, slots=4, max_len=64)
    with torch.inference_mode():
        want = ref.prefill(rows)
        got, shared = prefill_shared(dec, rows, keys)
    assert shared == 2 * len(a)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    for slot, toks in enumerate([a, b, a, a]):
        for cache, ref_cache in ((dec.k, ref.k), (dec.v, ref.v)):
            torch.testing.assert_close(
                cache[:, slot, :, : len(toks)],
                ref_cache[:, slot, :, : len(toks)],
                atol=1e-6,
                rtol=0,
            )


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "sample", "filter"])
def test_group_of_eight_prefills_once(tiny: Any, params: SamplingParams) -> None:
    model, tok = tiny
    prompt = tok.encode(TEXTS[4])

    async def body(engine: FastHFEngine) -> list[Any]:
        reqs = [engine.generate(prompt, _seeded(params, k)) for k in range(8)]
        return list(await asyncio.gather(*reqs))

    (res_on, on), (res_off, off) = _run_both(model, tok, body)
    _assert_same(res_on, res_off)
    assert on["prefill_calls"] == 1
    assert on["prefill_tokens"] == len(prompt)
    assert on["prefill_tokens_shared"] == 7 * len(prompt)
    assert off["prefill_tokens"] == 8 * len(prompt) and off["prefill_tokens_shared"] == 0
    if params.temperature == 0:
        assert res_on[0].token_ids == reference_greedy(model, prompt, params.max_new_tokens)
    else:  # every duplicate samples with its own seed
        assert len({tuple(r.token_ids) for r in res_on}) > 1
        for r in res_on:
            expected = rescore(model, prompt, r.token_ids, params.temperature)
            assert r.logprobs == pytest.approx(expected, abs=1e-4)


def test_mixed_duplicate_and_unique_prompts(tiny: Any) -> None:
    model, tok = tiny
    ids = [tok.encode(t) for t in TEXTS]
    order = [0, 1, 0, 2, 4, 0, 2, 3, 4, 0]  # interleaved groups and singletons
    prompts = [ids[i] for i in order]

    async def body(engine: FastHFEngine) -> list[Any]:
        reqs = [engine.generate(p, _seeded(PARAMS[k % 3], k)) for k, p in enumerate(prompts)]
        return list(await asyncio.gather(*reqs))

    (res_on, on), (res_off, off) = _run_both(model, tok, body)
    _assert_same(res_on, res_off)
    requested = sum(len(p) for p in prompts)
    assert on["prefill_tokens"] == sum(len(ids[i]) for i in set(order))
    assert on["prefill_tokens"] + on["prefill_tokens_shared"] == requested
    assert off["prefill_tokens"] == requested


@pytest.mark.parametrize("params", PARAMS[:2], ids=["greedy", "sample"])
def test_multi_turn_sessions(tiny: Any, params: SamplingParams) -> None:
    """Four sessions of one prompt over three turns; greedy turns stay identical, so later
    turns share at start > 0 (a reused slot prefix)."""
    model, tok = tiny
    base = tok.encode(TEXTS[4])

    async def episode(engine: FastHFEngine, k: int) -> list[Any]:
        ids, outs = list(base), []
        for turn in range(3):
            res = await engine.generate(ids, _seeded(params, 10 * k + turn), session_id=f"s{k}")
            outs.append(res)
            ids = ids + res.token_ids + tok.encode(f" tool {turn} says 42 .")
        return outs

    async def body(engine: FastHFEngine) -> list[Any]:
        runs = await asyncio.gather(*(episode(engine, k) for k in range(4)))
        return [res for run in runs for res in run]

    (res_on, on), (res_off, off) = _run_both(model, tok, body)
    _assert_same(res_on, res_off)
    assert on["reused_tokens"] == off["reused_tokens"] > 0
    requested = off["prefill_tokens"]
    assert on["prefill_tokens"] + on["prefill_tokens_shared"] == requested
    if params.temperature == 0:  # turns 2 and 3 are shared too, after the reused prefix
        assert on["prefill_tokens"] * 4 == requested
    else:
        assert on["prefill_tokens_shared"] == 3 * len(base)


def test_admission_keeps_group_together(tiny: Any) -> None:
    """Duplicates cost no prefill budget, so a group larger than the budget is admitted in
    one call (computed once) instead of being split."""
    model, tok = tiny
    prompt = tok.encode(TEXTS[1])
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=5)

    async def body(engine: FastHFEngine) -> list[Any]:
        reqs = [engine.generate(prompt, _seeded(params, k)) for k in range(8)]
        return list(await asyncio.gather(*reqs))

    (res_on, on), (res_off, off) = _run_both(model, tok, body, max_prefill_tokens=2 * len(prompt))
    _assert_same(res_on, res_off)
    assert on["prefill_calls"] == 1 and on["prefill_tokens"] == len(prompt)
    assert off["prefill_calls"] == 4


def test_share_prefill_option_routes(tiny: Any) -> None:
    from agentrl.config import EngineConfig, HFEngineConfig
    from agentrl.engines import EngineError, build_engine

    model, tok = tiny
    hf = HFEngineConfig(fast=True, max_seq_len=128, tuning=FastHFTuning(share_prefill=False))
    cfg = EngineConfig(kind="hf", hf=hf)
    engine = build_engine(cfg, model, tok)
    assert isinstance(engine, FastHFEngine) and engine.share_prefill is False
    assert make_hf_engine(model, tok, fast=True, max_seq_len=128).share_prefill is True  # type: ignore[attr-defined]
    with pytest.raises(EngineError, match="engine.hf.tuning.share_prefill: a fast-path option"):
        make_hf_engine(
            model, tok, fast=False, tuning=FastHFTuning(share_prefill=False)
        )  # never dropped silently
