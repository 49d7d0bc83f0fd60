"""Prefill as CUDA-graph replays (`engine.hf.prefill_graphs`, `_prefill_graphs.py`).

CPU: what the graphs rest on, run eagerly: a prefill padded to a bucket (rows, width, key
length) gives the same logits and writes the same cache as the unpadded one, and the bucket
and fallback rule. GPU: engines with and without prefill graphs give the same tokens and
logprobs over fresh, shared (GRPO group) and session prefills, big calls fall back to the
forward, and weight updates are seen by the captured graphs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
import torch
from engine_helpers import gpu_model, load_tiny

from agentrl.engines import EngineError, SamplingParams, make_hf_engine
from agentrl.engines._cudagraph import GraphPool
from agentrl.engines._prefill_graphs import PrefillGraphs
from agentrl.engines._static_model import StaticDecoder
from agentrl.engines.hf_fast import FastHFEngine

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _rows(seed: int) -> list[tuple[int, int, list[int]]]:
    """Three rows into slots 0-2: two fresh prompts of different lengths and a continuation
    (slot 2 holds 9 tokens from an earlier prefill; 5 new ones attend to them)."""
    gen = torch.Generator().manual_seed(seed)
    ids = lambda n: torch.randint(3, 600, (n,), generator=gen).tolist()  # noqa: E731
    return [(0, 0, ids(7)), (1, 0, ids(12)), (2, 9, ids(5))]


@pytest.mark.parametrize("compiled", [False, True])
def test_padded_prefill_equals_unpadded_cpu(compiled: bool) -> None:
    model, _ = load_tiny("qwen2")
    decoders = [StaticDecoder(model, 4, 256, compile_prefill=compiled) for _ in range(2)]
    prefix = torch.randint(3, 600, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    rows = _rows(0)
    with torch.inference_mode():
        for dec in decoders:
            dec.prefill([(2, 0, prefix)])
        plain = decoders[0].prefill(rows)
        dec = decoders[1]
        inp, per_row, _ = dec.prefill_inputs(rows, shape=(8, 16))
        padded = dec.prefill_logits(
            torch.from_numpy(inp), torch.from_numpy(per_row), dec.key_columns(128)
        )
    assert padded.shape[0] == 8
    torch.testing.assert_close(padded[:3], plain, atol=1e-5, rtol=1e-5)
    for got, want in ((decoders[1].k, decoders[0].k), (decoders[1].v, decoders[0].v)):
        # live slots 0-2 equal; padding wrote only into the scratch slot (index 4)
        torch.testing.assert_close(got[:, :4], want[:, :4], atol=1e-5, rtol=1e-5)


def test_bucket_and_fallback_rule() -> None:
    model, _ = load_tiny("qwen2")
    dec = StaticDecoder(model, 4, 1024)
    graphs = PrefillGraphs(dec, GraphPool(torch.device("cpu")), [1, 2, 4], [0] * 6, {})
    assert graphs.key([(0, 0, [1] * 5)]) == (2, 16, 128)  # at least 2 rows x 16 columns
    assert graphs.key([(0, 100, [1] * 40)] * 3) == (4, 64, 256)
    assert graphs.key([(0, 0, [1] * 900)] * 16) is None  # 16 x 1024 padded tokens: forward
    with pytest.raises(ValueError, match="smaller than"):
        dec.prefill_inputs([(0, 0, [1] * 20)], shape=(2, 16))


def test_prefill_graphs_option_needs_cuda_graphs() -> None:
    model, tok = load_tiny("qwen2")
    with pytest.raises(EngineError, match="prefill_graphs=True needs CUDA graphs"):
        make_hf_engine(model, tok, fast=True, prefill_graphs=True)
    with pytest.raises(EngineError, match="engine.hf.prefill_graphs: a fast-path option"):
        make_hf_engine(model, tok, fast=False, prefill_graphs=True)


def _episodes(engine: FastHFEngine, params: SamplingParams) -> list[list[int]]:
    """A GRPO-like round on one engine: 4 groups of 3 identical prompts (shared prefill),
    3 turns each with a tool-like suffix (session prefills), plus one long prompt (1,100
    tokens: 2,048 padded columns, past the graphs' token cap the test sets)."""
    gen = torch.Generator().manual_seed(7)
    bases = [torch.randint(3, 1000, (int(10 + 9 * g),), generator=gen).tolist() for g in range(4)]

    async def one(i: int, prompt: list[int]) -> list[int]:
        ids, out = list(prompt), []
        for turn in range(3):
            p = dataclasses.replace(params, seed=100 * i + turn)
            res = await engine.generate(ids, p, session_id=f"e{i}")
            out += res.token_ids + [-1]
            ids = ids + res.token_ids + [50 + turn, 60 + i, 70]
        return out

    async def body() -> list[list[int]]:
        try:
            jobs = [one(3 * g + r, bases[g]) for g in range(4) for r in range(3)]
            jobs.append(one(99, torch.randint(3, 1000, (1100,), generator=gen).tolist()))
            return list(await asyncio.gather(*jobs))
        finally:
            await engine.close()

    return asyncio.run(asyncio.wait_for(body(), timeout=600))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("compile_prefill", [False, True])
def test_prefill_graphs_match_the_forward_gpu(compile_prefill: bool) -> None:
    model = gpu_model("qwen2", torch.float32)
    kw: dict[str, Any] = {"max_batch_size": 16, "max_seq_len": 2048}
    kw["compile_prefill"] = compile_prefill
    for params in (
        SamplingParams(max_new_tokens=12, temperature=0.0),
        SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.9, top_k=50),
    ):
        graphs = FastHFEngine(model, [], prefill_graphs=True, **kw)
        # The default cap (8192 padded tokens) fits the long prompt's call if it is admitted
        # alone (2 x 2048); a lower one makes that call run the forward in any admission.
        assert graphs._prefill_graphs is not None
        graphs._prefill_graphs.max_tokens = 2048
        got = _episodes(graphs, params)
        want = _episodes(FastHFEngine(model, [], **kw), params)
        assert got == want
        assert graphs.stats["prefill_graph_captures"] > 0
        assert graphs.stats["prefill_graph_replays"] > 0
        assert graphs.stats["prefill_graph_fallbacks"] > 0  # the long prompt's call
        assert graphs.stats["prefill_tokens_shared"] > 0


@pytest.mark.gpu
@needs_gpu
def test_prefill_graphs_see_weight_updates_gpu() -> None:
    model = gpu_model("qwen2", torch.float32)
    prompt = list(range(5, 40))
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    engine = FastHFEngine(model, [], max_batch_size=4, max_seq_len=512, prefill_graphs=True)
    plain = FastHFEngine(model, [], max_batch_size=4, max_seq_len=512)

    async def body() -> None:
        try:
            before = await engine.generate(prompt, greedy)
            state = {k: v * 0.5 for k, v in model.state_dict().items() if "mlp.down" in k}
            engine.update_weights(state.items())  # the graph reads the same tensors
            after = await engine.generate(prompt, greedy)
            ref = await plain.generate(prompt, greedy)
            assert after.logprobs[0] != pytest.approx(before.logprobs[0], abs=1e-6)
            assert after.token_ids == ref.token_ids
            assert after.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
        finally:
            await engine.close()
            await plain.close()

    asyncio.run(asyncio.wait_for(body(), timeout=300))
