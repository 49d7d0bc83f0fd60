"""Prefill as CUDA-graph replays (`FastHFEngine(prefill_graphs=True)`, a code-level lever;
`_prefill_graphs.py`).

CPU: what the graphs rest on, run eagerly: a prefill padded to a bucket (rows, width, key
length) gives the same logits and writes the same cache as the unpadded one, and the bucket
and fallback rule. GPU: engines with and without prefill graphs give the same tokens and
logprobs over fresh, shared (GRPO group) and session prefills, big calls fall back to the
forward, and weight updates are seen by the captured graphs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

import pytest
import torch
from engine_helpers import gpu_model, load_tiny

from agentrl.config import FastHFTuning
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
    pool, pad = GraphPool(torch.device("cpu")), [0.0] * 6
    dec = StaticDecoder(model, 4, 4096)
    graphs = PrefillGraphs(dec, pool, [1, 2, 4, 8], pad, {})
    assert graphs.key([(0, 0, [1] * 5)]) == (1, 16, 128)  # at least 16 columns
    assert graphs.key([(0, 100, [1] * 40)] * 3) == (4, 64, 256)
    assert graphs.key([(0, 0, [1] * 300)] * 16) is None  # more rows than an admission holds
    assert graphs.key([(0, 0, [1] * 1500)] * 2) == (2, 2048, 2048)  # grows 1.37x: a graph
    assert graphs.key([(0, 0, [1] * 1100)] * 2) is None  # big, and padding grows it 1.86x
    assert graphs.key([(0, 0, [1] * 600)] * 8) is None  # big, and padding grows it 1.7x
    compiled = PrefillGraphs(
        StaticDecoder(model, 4, 1024, compile_prefill=True), pool, [1, 2], pad, {}
    )
    assert compiled.key([(0, 0, [1] * 5)]) == (2, 16, 128)  # compiled: never a size of 1
    with pytest.raises(ValueError, match="smaller than"):
        dec.prefill_inputs([(0, 0, [1] * 20)], shape=(2, 16))


class _SimulatedGraph:
    """SIMULATION of a CUDA graph on CPU: replay re-runs the captured function."""

    def __init__(self, fn: Any, out: torch.Tensor) -> None:
        self.fn, self.out = fn, out

    def replay(self) -> None:
        self.out.copy_(self.fn())


class _SimulatedPool:
    """SIMULATION of `GraphPool` on CPU (no CUDA graphs here): capture runs the function as
    the real one does (2 warm-ups, then the captured run), replay runs it again. It checks
    the host logic (buckets, static inputs and buffers, sharing, fallbacks, sampling), not
    capture; the GPU tests below run the real graphs."""

    def capture(self, fn: Any) -> tuple[_SimulatedGraph, torch.Tensor]:
        for _ in range(2):
            fn()
        out = fn()
        return _SimulatedGraph(fn, out), out


@pytest.mark.parametrize("batch", [16, 5])
def test_prefill_graph_host_logic_on_a_simulated_pool_cpu(batch: int) -> None:
    model, _ = load_tiny("qwen2")
    kw: dict[str, Any] = {"max_batch_size": batch, "max_seq_len": 512}
    kw["tuning"] = FastHFTuning(cuda_graphs=False)
    for params in (
        SamplingParams(max_new_tokens=6, temperature=0.0),
        SamplingParams(max_new_tokens=6, temperature=0.9, top_p=0.9, top_k=50),
    ):
        sim = FastHFEngine(model, [], **kw)
        assert sim._decoder is not None
        sim._prefill_graphs = PrefillGraphs(
            sim._decoder, cast(Any, _SimulatedPool()), sim.batch_buckets,
            sim._pad_column()[3:], sim.stats, max_tokens=1024,
        )  # fmt: skip
        got = _episodes(sim, params, vocab=600, long=300)
        _assert_same(got, _episodes(FastHFEngine(model, [], **kw), params, vocab=600, long=300))
        assert sim.stats["prefill_graph_replays"] > 0
        assert sim.stats["prefill_graph_fallbacks"] > 0  # the long prompt: 512 x ... > 1024
        assert sim.stats["prefill_tokens_shared"] > 0


def test_prefill_graphs_option_needs_cuda_graphs() -> None:
    model, tok = load_tiny("qwen2")
    with pytest.raises(EngineError, match="prefill_graphs=True needs CUDA graphs"):
        make_hf_engine(model, tok, fast=True, prefill_graphs=True)
    with pytest.raises(EngineError, match="engine.hf.prefill_graphs: a fast-path option"):
        make_hf_engine(model, tok, fast=False, prefill_graphs=True)


def _episodes(
    engine: FastHFEngine, params: SamplingParams, vocab: int = 1000, long: int = 1100
) -> list[Any]:
    """A GRPO-like round on one engine: 4 groups of 3 identical prompts (shared prefill),
    3 turns each with a tool-like suffix (session prefills), plus one long prompt (past
    the graphs' token cap the test sets). Each episode's tokens, logprobs and finish."""
    gen = torch.Generator().manual_seed(7)
    bases = [torch.randint(3, vocab, (int(10 + 9 * g),), generator=gen).tolist() for g in range(4)]

    async def one(i: int, prompt: list[int]) -> list[Any]:
        ids, out = list(prompt), []
        for turn in range(3):
            p = dataclasses.replace(params, seed=100 * i + turn)
            res = await engine.generate(ids, p, session_id=f"e{i}")
            out.append((res.token_ids, res.finish_reason, res.logprobs))
            ids = ids + res.token_ids + [50 + turn, 60 + i, 70]
        return out

    async def body() -> list[list[int]]:
        try:
            jobs = [one(3 * g + r, bases[g]) for g in range(4) for r in range(3)]
            jobs.append(one(99, torch.randint(3, vocab, (long,), generator=gen).tolist()))
            return list(await asyncio.gather(*jobs))
        finally:
            await engine.close()

    return asyncio.run(asyncio.wait_for(body(), timeout=600))


def _assert_same(got: list[Any], want: list[Any]) -> None:
    """Same tokens and finish reasons in every turn; logprobs within float32 noise (a padded
    shape may run other GEMM kernels)."""
    assert len(got) == len(want)
    for g_turns, w_turns in zip(got, want, strict=True):
        assert [t[:2] for t in g_turns] == [t[:2] for t in w_turns]
        for g, w in zip(g_turns, w_turns, strict=True):
            assert g[2] == pytest.approx(w[2], abs=1e-4)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("compile_prefill", [False, True])
def test_prefill_graphs_match_the_forward_gpu(compile_prefill: bool) -> None:
    model = gpu_model("qwen2", torch.float32)
    kw: dict[str, Any] = {"max_batch_size": 16, "max_seq_len": 2048}
    kw["tuning"] = FastHFTuning(compile_prefill=compile_prefill)
    for params in (
        SamplingParams(max_new_tokens=12, temperature=0.0),
        SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.9, top_k=50),
    ):
        graphs = FastHFEngine(model, [], prefill_graphs=True, **kw)
        # The default cap (8192 padded tokens) fits the long prompt's call if it is admitted
        # alone (1 or 2 x 2048); a lower one makes it run the forward in any admission.
        assert graphs._prefill_graphs is not None
        graphs._prefill_graphs.max_tokens = 1024
        got = _episodes(graphs, params)
        _assert_same(got, _episodes(FastHFEngine(model, [], **kw), params))
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
