"""HFEngine on a CUDA GPU: the same reference checks as on CPU, plus a bf16 smoke run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from engine_helpers import load_tiny, reference_greedy, rescore, sessions_with_holes

from agentrl.engines import HFEngine, SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
TEXTS = ["What is 3 + 4?", "def f(x): return", "a", "The result of this expression : 1 + 2 is"]


async def _generate(engine: HFEngine, prompts: list[list[int]], params: Any) -> Any:
    try:
        return await engine.generate_batch(prompts, params)
    finally:
        await engine.close()


def test_cuda_greedy_and_sampled_logprobs_match_reference() -> None:
    model, tok = load_tiny("qwen2")
    model = model.to("cuda")
    prompts = [tok.encode(t) for t in TEXTS]
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    results = asyncio.run(_generate(HFEngine(model, tok), prompts, greedy))
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, 16)
    sampled = SamplingParams(max_new_tokens=16, temperature=0.8, top_p=0.9, seed=0)
    results = asyncio.run(_generate(HFEngine(model, tok), prompts, sampled))
    for prompt, res in zip(prompts, results, strict=True):
        expected = rescore(model, prompt, res.token_ids, 0.8)
        assert res.logprobs == pytest.approx(expected, abs=1e-3)


def test_cuda_bfloat16_smoke() -> None:
    model, tok = load_tiny("qwen2-small")
    model = model.to("cuda", torch.bfloat16)
    prompts = [tok.encode(t) for t in TEXTS]
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=1)
    engine = HFEngine(model, tok, device="cuda")
    results = asyncio.run(_generate(engine, prompts, params))
    for res in results:
        assert res.finish_reason in ("stop", "length") and res.token_ids
        assert all(lp <= 0.0 for lp in res.logprobs)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_cuda_sessions_with_holes_match_no_reuse(attn: str) -> None:
    """Multi-turn sessions prefilled together (a cache laid out [pad][prefix][pad][suffix])
    beside a fresh prompt, on CUDA in float32 with each attention implementation: no request
    fails (a NaN from a fully masked pad row would), and reuse changes nothing."""
    model, tok = load_tiny("qwen2", attn_implementation=attn)
    model = model.to("cuda")
    prompts = [tok.encode(t) for t in TEXTS]
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)

    async def both() -> tuple[list[Any], list[Any], int]:
        engine = HFEngine(model, tok, device="cuda")
        try:
            reused = await sessions_with_holes(engine, tok, prompts, greedy, reuse=True)
            plain = await sessions_with_holes(engine, tok, prompts, greedy, reuse=False)
            return reused, plain, engine.stats["reused_tokens"]
        finally:
            await engine.close()

    reused, plain, n_reused = asyncio.run(both())
    assert n_reused > 0
    for a, b in zip(reused, plain, strict=True):
        assert a.finish_reason != "error" and b.finish_reason != "error", (a.error, b.error)
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)
