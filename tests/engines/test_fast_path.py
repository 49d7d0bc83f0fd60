"""FastHFEngine (static KV cache + own forward) on CPU, float32, against plain transformers.

The CUDA-graph capture itself needs a GPU (test_fast_path_gpu.py); everything else (the
static forward, slots, session reuse, graph-safe sampling, engine semantics) runs here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from engine_helpers import (
    GREEDY,
    TEXTS,
    load_tiny,
    reference_greedy,
    rescore,
    run_async,
    with_engine,
)

from agentrl.config import FastHFTuning
from agentrl.engines import EngineError, HFEngine, SamplingParams, make_hf_engine
from agentrl.engines._fast_sampling import FILTER, SAMPLE, counter_uniform, sample_rows
from agentrl.engines._slots import SlotPool
from agentrl.engines._static_model import INPUT_ROWS, StaticDecoder
from agentrl.engines.hf_fast import FastHFEngine


@pytest.mark.parametrize("preset", ["qwen2", "llama", "qwen3"])
def test_static_forward_matches_transformers(preset: str) -> None:
    """Prefill (two rows, one reusing its slot's prefix) and decode vs full HF forwards."""
    model, tok = load_tiny(preset)
    a, b = tok.encode(TEXTS[0]), tok.encode(TEXTS[1])
    dec = StaticDecoder(model, slots=4, max_len=96)
    with torch.inference_mode():
        logits = dec.prefill([(0, 0, a), (3, 0, b)])
        for row, ids in enumerate([a, b]):
            ref = model(torch.tensor([ids])).logits[0, -1]
            torch.testing.assert_close(logits[row], ref, atol=1e-5, rtol=1e-5)
        inp = torch.zeros(INPUT_ROWS, 3, dtype=torch.float64)  # third column: padding row
        inp[:3] = torch.tensor([[5.0, 7.0, 0.0], [len(a), len(b), 0.0], [0.0, 3.0, 4.0]])
        out = dec.decode(inp, 64, 0)
        for col, ids in enumerate([a + [5], b + [7]]):
            ref = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], dim=-1)
            assert int(out[0, col]) == int(ref.argmax())
            assert float(out[1, col]) == pytest.approx(float(ref.max()), abs=1e-5)
        # Slot 0 now holds a + [5]; continue it in place with two more tokens.
        logits = dec.prefill([(0, len(a) + 1, [9, 10])])
        ref = model(torch.tensor([a + [5, 9, 10]])).logits[0, -1]
        torch.testing.assert_close(logits[0], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", ["qwen2", "llama", "qwen3"])
def test_greedy_matches_generate_with_joins(preset: str) -> None:
    model, tok = load_tiny(preset)
    prompts = [tok.encode(t) for t in TEXTS]
    long = SamplingParams(max_new_tokens=24, temperature=0.0)

    async def body(engine: FastHFEngine) -> list[Any]:
        first = [asyncio.create_task(engine.generate(p, long)) for p in prompts[:2]]
        while engine.stats["decode_steps"] < 3:
            await asyncio.sleep(0.001)
        rest = [asyncio.create_task(engine.generate(p, long)) for p in prompts[2:]]
        return list(await asyncio.gather(*first, *rest))

    results = run_async(with_engine(FastHFEngine, model, tok, body, max_batch_size=3))
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, long.max_new_tokens)
        assert res.logprobs == pytest.approx(rescore(model, prompt, res.token_ids, 0), abs=1e-4)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=20, temperature=1.0, seed=1),
        SamplingParams(max_new_tokens=20, temperature=0.7, top_p=0.9, top_k=50, seed=2),
        SamplingParams(max_new_tokens=20, temperature=1.3, top_k=5, seed=3),
    ],
)
def test_sampled_logprobs_match_rescore(tiny: Any, params: SamplingParams) -> None:
    model, tok = tiny
    prompts = [tok.encode(t) for t in TEXTS]

    async def body(engine: FastHFEngine) -> list[Any]:
        return await engine.generate_batch(prompts, params)

    for prompt, res in zip(
        prompts, run_async(with_engine(FastHFEngine, model, tok, body)), strict=True
    ):
        expected = rescore(model, prompt, res.token_ids, params.temperature)
        assert res.logprobs == pytest.approx(expected, abs=1e-4)


def test_seeded_request_ignores_batch_company(tiny: Any) -> None:
    model, tok = tiny
    prompts = [tok.encode(t) for t in TEXTS]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=7)
    others = SamplingParams(max_new_tokens=30, temperature=1.0)

    async def alone(engine: FastHFEngine) -> Any:
        return await engine.generate(prompts[0], params)

    async def crowded(engine: FastHFEngine) -> Any:
        noise = [engine.generate(p, others) for p in prompts[1:]]
        return (await asyncio.gather(engine.generate(prompts[0], params), *noise))[0]

    a = run_async(with_engine(FastHFEngine, model, tok, alone))
    b = run_async(with_engine(FastHFEngine, model, tok, crowded))
    assert a.token_ids == b.token_ids


def test_decode_chunk_does_not_change_tokens(tiny: Any) -> None:
    """Several steps per hop (tokens fed back on device) == one step per hop, token for
    token and logprob for logprob, with stops inside a chunk and staggered lengths."""
    model, tok = tiny
    prompts = [tok.encode(t) for t in TEXTS]
    lengths = [3, 17, 9, 30, 1]
    ref = reference_greedy(model, prompts[1], 12)
    stop = SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=[ref[5]])

    async def body(engine: FastHFEngine) -> list[Any]:
        reqs = [
            engine.generate(p, SamplingParams(max_new_tokens=n, temperature=1.0, seed=i))
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
        ]
        return await asyncio.gather(*reqs, engine.generate(prompts[1], stop))

    one = run_async(
        with_engine(FastHFEngine, model, tok, body, tuning=FastHFTuning(decode_chunk=1))
    )
    many = run_async(
        with_engine(FastHFEngine, model, tok, body, tuning=FastHFTuning(decode_chunk=8))
    )
    for a, b in zip(one, many, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert many[-1].finish_reason == "stop" and many[-1].token_ids[-1] == ref[5]


def test_sampler_distribution_and_filters() -> None:
    """Counter-based inverse-CDF draws follow softmax(logits / T), and filters hold."""
    torch.manual_seed(0)
    logits = torch.randn(1, 8).repeat(20000, 1)
    params = torch.zeros(6, 20000, dtype=torch.float64)
    params[0], params[2], params[3], params[5] = 12345, torch.arange(20000), 0.8, 1.0
    tokens, logps = sample_rows(logits, params, SAMPLE)
    probs = torch.softmax(logits[0] / 0.8, dim=-1)
    freq = torch.bincount(tokens, minlength=8).double() / 20000
    assert (freq - probs.double()).abs().sum() < 0.03
    torch.testing.assert_close(logps, torch.log(probs)[tokens])
    params[4] = 2  # top-k 2
    tokens, _ = sample_rows(logits, params, FILTER)
    assert set(tokens.tolist()) == set(probs.topk(2).indices.tolist())
    params[4], params[5] = 0, 1e-6  # top-p ~0: only the argmax survives
    tokens, _ = sample_rows(logits, params, FILTER)
    assert set(tokens.tolist()) == {int(probs.argmax())}
    u = counter_uniform(torch.tensor([1, 1, 2]), torch.tensor([0, 0, 0]), torch.tensor([0, 0, 0]))
    assert u[0] == u[1] and u[0] != u[2] and bool(((u >= 0) & (u < 1)).all())


def test_session_reuse_matches_fresh_prefill(tiny: Any) -> None:
    model, tok = tiny
    base = tok.encode(TEXTS[4])
    params = SamplingParams(max_new_tokens=10, temperature=0.0)

    async def episode(engine: FastHFEngine, session: str | None) -> list[list[int]]:
        ids, outs = list(base), []
        for turn in range(3):
            res = await engine.generate(ids, params, session_id=session)
            outs.append(res.token_ids)
            ids = ids + res.token_ids + tok.encode(f" tool {turn} says 42 .")
        return outs

    async def body(engine: FastHFEngine) -> tuple[Any, Any, Any]:
        with_reuse = await episode(engine, "ep")
        reused = engine.stats["reused_tokens"]
        without = await episode(engine, None)
        return with_reuse, without, reused

    with_reuse, without, reused = run_async(with_engine(FastHFEngine, model, tok, body))
    assert with_reuse == without
    assert reused > 2 * len(base)


def test_slot_pool_parks_and_evicts() -> None:
    pool = SlotPool(n_slots=2, max_parked=2)
    a, _ = pool.acquire("s1", [1, 2, 3])
    pool.park("s1", a, [1, 2, 3, 4])
    slot, reuse = pool.acquire("s1", [1, 2, 3, 4, 5, 6])
    assert slot == a and reuse == 3  # the cache holds ids[:-1]
    pool.park("s1", slot, [1, 2, 3, 4, 5, 6, 7])
    b, _ = pool.acquire(None, [9])
    c, _ = pool.acquire(None, [9])  # no free slot left: evicts the parked session
    assert c == a and pool.parked == 0 and b != a
    with pytest.raises(RuntimeError):  # every slot runs: admission control must prevent this
        pool.acquire("s1", [1, 2])
    pool.release(b)
    assert pool.acquire("s1", [1, 2]) == (b, 0)  # the session is gone: a fresh slot


def test_stops_and_cache_end(tiny: Any) -> None:
    model, tok = tiny
    prompt = tok.encode(TEXTS[0])
    ref = reference_greedy(model, prompt, 12)
    stop_id = SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=[ref[3]])
    stop_str = SamplingParams(max_new_tokens=12, temperature=0.0, stop=[tok.decode(ref[2:4])])

    async def body(engine: FastHFEngine) -> list[Any]:
        return [
            await engine.generate(prompt, stop_id),
            await engine.generate(prompt, stop_str),
            await engine.generate(prompt, SamplingParams(max_new_tokens=50, temperature=0)),
        ]

    by_id, by_str, capped = run_async(
        with_engine(FastHFEngine, model, tok, body, max_seq_len=len(prompt) + 5)
    )
    assert by_id.token_ids == ref[: ref.index(ref[3]) + 1] and by_id.finish_reason == "stop"
    assert by_str.finish_reason == "stop" and len(by_str.token_ids) <= 4
    assert capped.finish_reason == "length" and len(capped.token_ids) == 5


def test_update_weights_and_failure_recovery() -> None:
    model, tok = load_tiny("qwen2")
    prompt = tok.encode(TEXTS[1])

    async def body(engine: FastHFEngine) -> tuple[Any, Any, Any, Any]:
        before = await engine.generate(prompt, GREEDY, session_id="s")
        gen = torch.Generator().manual_seed(0)
        state = {
            k: torch.randn(v.shape, generator=gen) * 0.5
            for k, v in model.state_dict().items()
            if "mlp" in k
        }
        engine.update_weights(state.items())
        after = await engine.generate(prompt, GREEDY, session_id="s")
        decoder = engine._decoder
        assert decoder is not None
        real = decoder.decode
        decoder.decode = lambda *a: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore
        failed = await engine.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))
        decoder.decode = real  # type: ignore[method-assign]
        again = await engine.generate(prompt, GREEDY)
        return before, after, failed, again

    before, after, failed, again = run_async(
        with_engine(FastHFEngine, model, tok, body, max_batch_size=2)
    )
    assert after.token_ids == reference_greedy(model, prompt, 16)
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    assert after.logprobs == pytest.approx(rescore(model, prompt, after.token_ids, 0), abs=1e-4)
    assert failed.finish_reason == "error" and "boom" in (failed.error or "")
    assert again.token_ids == after.token_ids


def test_make_hf_engine_routes_and_falls_back(tiny: Any) -> None:
    model, tok = tiny
    assert type(make_hf_engine(model, tok)) is HFEngine  # auto: CPU keeps the plain path
    fast = make_hf_engine(model, tok, fast=True, max_seq_len=256)
    assert isinstance(fast, FastHFEngine) and fast.cuda_graphs is False
    gemma, gtok = load_tiny("gemma2")
    assert type(make_hf_engine(gemma, gtok, fast="auto")) is HFEngine
    with pytest.raises(EngineError, match="does not support this model"):
        make_hf_engine(gemma, gtok, fast=True, max_seq_len=256)  # asked for: never dropped
    fast.sleep()
    fast.wake()
    res = run_async(_run_and_close(fast, tok.encode(TEXTS[2])))
    assert res.token_ids == reference_greedy(model, tok.encode(TEXTS[2]), 16)


async def _run_and_close(engine: HFEngine, prompt: list[int]) -> Any:
    try:
        return await engine.generate(prompt, GREEDY)
    finally:
        await engine.close()


def test_build_engine_routes_through_hf_fast(tiny: Any) -> None:
    from agentrl.config import EngineConfig, HFEngineConfig
    from agentrl.engines import build_engine

    model, tok = tiny
    plain = build_engine(EngineConfig(kind="hf", max_batch_size=4), model, tok)
    assert type(plain) is HFEngine  # "auto" on CPU
    hf = HFEngineConfig(fast=True, max_seq_len=128)
    cfg = EngineConfig(kind="hf", max_batch_size=4, hf=hf)
    fast = build_engine(cfg, model, tok)
    assert isinstance(fast, FastHFEngine) and fast.max_positions == 128
    assert fast.precapture([64]) == 0  # no CUDA graphs on CPU


@pytest.mark.parametrize("preset", ["qwen2", "qwen3", "llama"])
def test_static_forward_calls_only_linear_and_embedding_modules(preset: str) -> None:
    """The static forward computes norms, the MLP's activation, attention and rotary itself:
    transformers wraps those modules in the `kernels` hub layer, whose context variable turns
    process-global while compiled code runs, so a compiled update on the trainer's thread and
    an engine thread calling them race (seen as dynamo's SpeculationLogDivergence in a
    pipelined CPU run). Forward hooks fire on every module call: on anything but `Linear` and
    `Embedding` none may fire, and the logits still match transformers."""
    model, tok = load_tiny(preset)
    calls: list[str] = []
    for name, mod in model.named_modules():
        if not isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
            mod.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
    ids = tok.encode(TEXTS[0])
    dec = StaticDecoder(model, slots=2, max_len=64)
    with torch.inference_mode():
        logits = dec.prefill([(0, 0, ids)])
        inp = torch.zeros(INPUT_ROWS, 1, dtype=torch.float64)
        inp[:3] = torch.tensor([[5.0], [len(ids)], [0.0]])
        dec.decode(inp, 64, 0)
        assert calls == []
        ref = model(torch.tensor([ids])).logits[0, -1]
    assert any("norm" in c for c in calls) and any("act_fn" in c for c in calls)
    torch.testing.assert_close(logits[0], ref, atol=1e-5, rtol=1e-5)
