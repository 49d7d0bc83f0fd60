"""The torch.compile'd decode forward (`StaticDecoder(compile=True)`) against the eager one.

On CPU (float32) the compiled step must give the same tokens, logprobs within 1e-5 and the
same cache contents as eager, with at most two compiles (batch 1, batch >= 2) over several
batch sizes and key lengths. The GPU tests add CUDA-graph capture of the compiled step.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from engine_helpers import (
    TEXTS,
    gpu_model,
    load_tiny,
    reference_greedy,
    rescore,
    run_async,
    with_engine,
)

from agentrl.config import FastHFTuning
from agentrl.engines import EngineError, SamplingParams, make_hf_engine
from agentrl.engines._fast_sampling import GREEDY, SAMPLE
from agentrl.engines._static_model import INPUT_ROWS, StaticDecoder, _reduce_attention
from agentrl.engines.hf_fast import FastHFEngine

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _decode_run(dec: StaticDecoder, prompts: list[list[int]], plan: list[tuple[int, int]]) -> Any:
    """Prefill `prompts` into slots 0.., then decode_step per (batch, key length) of `plan`;
    rows past the prompts are padding (scratch slot). Returns the real rows' outputs [2, n]."""
    outs = []
    with torch.inference_mode():
        dec.prefill([(s, 0, p) for s, p in enumerate(prompts)])
        for batch, length in plan:
            inp = torch.zeros(INPUT_ROWS, batch, dtype=torch.float64, device=dec.device)
            for col, prompt in enumerate(prompts[:batch]):
                inp[:3, col] = torch.tensor([3.0 + col, len(prompt), col])
            inp[2, len(prompts) :] = dec.scratch
            inp[6] = 0.8  # temperature: SAMPLE mode draws from it; GREEDY ignores it
            for mode in (GREEDY, SAMPLE):
                outs.append(dec.decode_step(inp, length, mode)[:, : len(prompts)].cpu())
    return torch.cat(outs, dim=1)


def test_reduce_attention_matches_sdpa() -> None:
    """The reduction-form attention the compiled step uses (GQA groups, a ragged mask)."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 2, 4, 16, generator=gen)
    keys, values = torch.randn(2, 3, 2, 40, 16, generator=gen)
    keep = (torch.arange(40)[None, :] <= torch.tensor([0, 17, 39])[:, None])[:, None, None]
    ref = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep, scale=0.3)
    torch.testing.assert_close(_reduce_attention(q, keys, values, keep, 0.3), ref)


def test_compiled_decode_matches_eager_cpu() -> None:
    """Compiled vs eager on CPU: tokens, logprobs, cache; batch/length changes recompile at
    most once more (batch 1 is specialised); a second decoder reuses the compiled code."""
    from torch._dynamo.utils import counters

    model, tok = load_tiny("qwen2")
    prompts = [tok.encode(t) for t in TEXTS[:2]]
    plan = [(3, 32), (3, 96), (5, 64), (1, 40), (1, 96)]
    eager = StaticDecoder(model, slots=4, max_len=96)
    ref = _decode_run(eager, prompts, plan)
    before = counters["stats"]["unique_graphs"]
    compiled = StaticDecoder(model, slots=4, max_len=96, compile=True)
    out = _decode_run(compiled, prompts, plan)
    assert torch.equal(out[0], ref[0])
    torch.testing.assert_close(out[1], ref[1], atol=1e-5, rtol=0)
    # The compiled step wrote the same K/V in place (scratch slot excluded).
    for got, want in ((compiled.k, eager.k), (compiled.v, eager.v)):
        torch.testing.assert_close(got[:, :4, :, :96], want[:, :4], atol=1e-5, rtol=1e-5)
    again = _decode_run(StaticDecoder(model, slots=4, max_len=96, compile=True), prompts, plan)
    assert torch.equal(again, out)
    assert counters["stats"]["unique_graphs"] - before <= 2


def test_engine_compile_decode_option() -> None:
    """`compile_decode` reaches the decoder through make_hf_engine; where HFEngine would run
    it is an error naming the option."""
    model, tok = load_tiny("qwen2")
    prompts = [tok.encode(t) for t in TEXTS[:2]]
    params = SamplingParams(max_new_tokens=8, temperature=0.0)

    async def body(engine: Any) -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, params) for p in prompts)))

    def build(m: Any, t: Any, **kw: Any) -> Any:
        return make_hf_engine(m, t, fast=True, tuning=FastHFTuning(compile_decode=True), **kw)

    results = run_async(with_engine(build, model, tok, body, max_batch_size=2))
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, 8)
        assert res.logprobs == pytest.approx(rescore(model, prompt, res.token_ids, 0), abs=1e-4)
    with pytest.raises(EngineError, match="engine.hf.tuning.compile_decode: a fast-path option"):
        make_hf_engine(
            model, tok, fast=False, tuning=FastHFTuning(compile_decode=True)
        )  # never dropped silently


# ---------------------------------------------------------------------- GPU


def _gpu_batch(engine: FastHFEngine, prompts: list[list[int]], params: SamplingParams) -> Any:
    async def body() -> Any:
        try:
            return await engine.generate_batch(prompts, params)
        finally:
            await engine.close()

    return asyncio.run(asyncio.wait_for(body(), timeout=600))


def _gpu_prompts(n: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1024, (int(8 + 9 * i),), generator=gen).tolist() for i in range(n)]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_graphs_match_eager_graphs_gpu(dtype: torch.dtype) -> None:
    """Compiled + CUDA-graph replay vs uncompiled graphs: fp32 greedy tokens identical, bf16
    logprobs of the compiled run's tokens within tolerance of a transformers rescore."""
    model = gpu_model("qwen2", dtype)
    prompts = _gpu_prompts(5, seed=int(dtype == torch.bfloat16))
    params = SamplingParams(max_new_tokens=40, temperature=0.0)
    kw: dict[str, Any] = {"max_batch_size": 8, "max_seq_len": 512}
    engine = FastHFEngine(model, [], tuning=FastHFTuning(compile_decode=True), **kw)
    compiled = _gpu_batch(engine, prompts, params)
    assert engine.captured_graphs > 0
    if dtype == torch.float32:
        eager = _gpu_batch(FastHFEngine(model, [], **kw), prompts, params)
        for c, e in zip(compiled, eager, strict=True):
            assert c.token_ids == e.token_ids
            assert c.logprobs == pytest.approx(e.logprobs, abs=1e-4)
        return
    diffs = []
    for prompt, res in zip(prompts, compiled, strict=True):
        expected = rescore(model, prompt, res.token_ids, 0)
        diffs += [abs(a - b) for a, b in zip(res.logprobs, expected, strict=True)]
    assert sum(diffs) / len(diffs) < 0.05 and max(diffs) < 0.3, (
        sum(diffs) / len(diffs),
        max(diffs),
    )


@pytest.mark.gpu
@needs_gpu
def test_compiled_graphs_see_weight_updates_and_survive_sleep_gpu() -> None:
    """Graphs of the compiled step read the weights in place; a woken engine (new decoder)
    reuses the compiled code and gives the same logprobs."""
    model = gpu_model("qwen2", torch.float32)
    prompt = _gpu_prompts(1, seed=3)[0]
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    engine = FastHFEngine(
        model, [], max_batch_size=4, max_seq_len=512, tuning=FastHFTuning(compile_decode=True)
    )

    async def body() -> None:
        await engine.generate(prompt, greedy)
        state = {k: v * 0.5 for k, v in model.state_dict().items() if "mlp.down" in k}
        engine.update_weights(state.items())
        first = await engine.generate(prompt, greedy)
        assert first.logprobs == pytest.approx(rescore(model, prompt, first.token_ids, 0), abs=1e-3)
        engine.sleep()
        engine.wake()
        again = await engine.generate(prompt, greedy)
        assert again.token_ids == first.token_ids
        assert again.logprobs == pytest.approx(first.logprobs, abs=1e-5)
        await engine.close()

    asyncio.run(asyncio.wait_for(body(), timeout=600))


def test_compiled_prefill_matches_eager_cpu() -> None:
    """`compile_prefill`: one compiled graph for every prefill shape (one row, one token,
    reused prefixes of different lengths), with the eager prefill's logits and cache."""
    from torch._dynamo.utils import counters

    model, tok = load_tiny("qwen2")
    a, b, c = (tok.encode(t) for t in TEXTS[:3])
    calls = [
        [(0, 0, a), (1, 0, b), (2, 0, c)],  # fresh prompts of different lengths
        [(3, 0, [5])],  # one row, one token
        [(0, len(a), [7, 8, 9]), (2, len(c), [4])],  # suffixes after reused prefixes
        [(1, len(b), [6, 6])],
        [(3, 1, b + c)],  # a long suffix after a one-token prefix
    ]
    eager = StaticDecoder(model, slots=4, max_len=96)
    compiled = StaticDecoder(model, slots=4, max_len=96, compile_prefill=True)
    before = counters["stats"]["unique_graphs"]
    with torch.inference_mode():
        for rows in calls:
            want, got = eager.prefill(rows), compiled.prefill(rows)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] - before == 1
    for got_c, want_c in ((compiled.k, eager.k), (compiled.v, eager.v)):
        torch.testing.assert_close(got_c[:, :4, :, :96], want_c[:, :4], atol=1e-5, rtol=1e-5)


def test_engine_compile_prefill_option() -> None:
    """`compile_prefill` reaches the decoder; greedy multi-turn sessions equal transformers."""
    model, tok = load_tiny("qwen2")
    prompts = [tok.encode(t) for t in TEXTS[:3]]
    params = SamplingParams(max_new_tokens=8, temperature=0.0)

    async def body(engine: Any) -> list[Any]:
        firsts = await asyncio.gather(
            *(engine.generate(p, params, session_id=f"s{i}") for i, p in enumerate(prompts))
        )
        seconds = [p + r.token_ids + [5, 6, 7] for p, r in zip(prompts, firsts, strict=True)]
        return list(
            await asyncio.gather(
                *(engine.generate(p, params, session_id=f"s{i}") for i, p in enumerate(seconds))
            )
        ), seconds

    def build(m: Any, t: Any, **kw: Any) -> Any:
        return make_hf_engine(m, t, fast=True, tuning=FastHFTuning(compile_prefill=True), **kw)

    results, seconds = run_async(with_engine(build, model, tok, body, max_batch_size=4))
    for prompt, res in zip(seconds, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, 8)
        assert res.logprobs == pytest.approx(rescore(model, prompt, res.token_ids, 0), abs=1e-4)
    with pytest.raises(EngineError, match="engine.hf.tuning.compile_prefill: a fast-path option"):
        make_hf_engine(model, tok, fast=False, tuning=FastHFTuning(compile_prefill=True))


@pytest.mark.gpu
@needs_gpu
def test_compiled_prefill_gpu() -> None:
    """`compile_prefill` on CUDA, pinned memory-efficient attention inside the compiled
    graph: fp32 greedy tokens equal the eager prefill's, over fresh and session prefills."""
    model = gpu_model("qwen2", torch.float32)
    prompts = _gpu_prompts(5, seed=4)
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    kw: dict[str, Any] = {"max_batch_size": 8, "max_seq_len": 512}

    def run(engine: FastHFEngine) -> list[list[int]]:
        async def body() -> list[list[int]]:
            try:
                outs = []
                for turn in range(2):
                    res = await asyncio.gather(
                        *(
                            engine.generate(p, greedy, session_id=f"s{i}")
                            for i, p in enumerate(prompts)
                        )
                    )
                    outs += [r.token_ids for r in res]
                    prompts[:] = [
                        p + r.token_ids + [11 + turn] * 3 for p, r in zip(prompts, res, strict=True)
                    ]
                return outs
            finally:
                await engine.close()

        start = [list(p) for p in prompts]
        try:
            return asyncio.run(asyncio.wait_for(body(), timeout=600))
        finally:
            prompts[:] = start

    compiled = run(FastHFEngine(model, [], tuning=FastHFTuning(compile_prefill=True), **kw))
    assert compiled == run(FastHFEngine(model, [], **kw))
