"""HFEngine correctness on CPU against plain transformers (tiny random-init models, float32)."""

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
    sessions_with_holes,
    with_engine,
)

from agentrl.engines import EngineError, GenerateResult, HFEngine, SamplingParams


def _prompts(tok: Any) -> list[list[int]]:
    return [tok.encode(t) for t in TEXTS]


@pytest.mark.parametrize("preset", ["qwen2", "llama"])
def test_greedy_batch_matches_model_generate(preset: str) -> None:
    model, tok = load_tiny(preset)
    prompts = _prompts(tok)

    async def body(engine: HFEngine) -> list[GenerateResult]:
        return await engine.generate_batch(prompts, GREEDY)

    results = run_async(with_engine(HFEngine, model, tok, body))
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, GREEDY.max_new_tokens)
        assert res.finish_reason in ("stop", "length")
        assert res.logprobs == pytest.approx(rescore(model, prompt, res.token_ids, 0), abs=1e-4)


def test_requests_joining_mid_decode_match_reference(tiny: Any) -> None:
    model, tok = tiny
    prompts = _prompts(tok)
    long = SamplingParams(max_new_tokens=24, temperature=0.0)

    async def body(engine: HFEngine) -> list[GenerateResult]:
        first = [asyncio.create_task(engine.generate(p, long)) for p in prompts[:2]]
        while engine.stats["decode_steps"] < 3:
            await asyncio.sleep(0.001)
        second = [asyncio.create_task(engine.generate(p, long)) for p in prompts[2:4]]
        while engine.stats["decode_steps"] < 8:
            await asyncio.sleep(0.001)
        third = [asyncio.create_task(engine.generate(prompts[4], long))]
        return list(await asyncio.gather(*first, *second, *third))

    results = run_async(with_engine(HFEngine, model, tok, body, max_batch_size=3))
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == reference_greedy(model, prompt, long.max_new_tokens)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=20, temperature=1.0, seed=1),
        SamplingParams(max_new_tokens=20, temperature=0.7, top_p=0.9, top_k=50, seed=2),
        SamplingParams(max_new_tokens=20, temperature=1.3, top_k=5, seed=3),
    ],
)
def test_sampled_logprobs_match_full_rescore(tiny: Any, params: SamplingParams) -> None:
    model, tok = tiny
    prompts = _prompts(tok)

    async def body(engine: HFEngine) -> list[GenerateResult]:
        return await engine.generate_batch(prompts, params)

    for prompt, res in zip(
        prompts, run_async(with_engine(HFEngine, model, tok, body)), strict=True
    ):
        assert len(res.token_ids) == len(res.logprobs) > 0
        expected = rescore(model, prompt, res.token_ids, params.temperature)
        assert res.logprobs == pytest.approx(expected, abs=1e-4)


def test_seeded_sampling_is_independent_of_batch_companions(tiny: Any) -> None:
    model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.95, seed=7)

    async def alone(engine: HFEngine) -> GenerateResult:
        return await engine.generate(prompts[0], params)

    async def crowded(engine: HFEngine) -> list[GenerateResult]:
        others = SamplingParams(max_new_tokens=16, temperature=1.0)
        tasks = [engine.generate(p, others) for p in prompts[1:]]
        return await asyncio.gather(engine.generate(prompts[0], params), *tasks)

    solo = run_async(with_engine(HFEngine, model, tok, alone))
    together = run_async(with_engine(HFEngine, model, tok, crowded))[0]
    assert solo.token_ids == together.token_ids


def test_session_prefix_reuse_matches_no_reuse(tiny: Any) -> None:
    """Three turns of four episodes, observations appended between turns; with and without
    session reuse the outputs (and logprobs) agree, and reuse actually happened."""
    model, tok = tiny
    observation = tok.encode("<|im_end|>\n<|im_start|>tool\n<tool_response>42</tool_response>")

    async def episodes(engine: HFEngine, use_sessions: bool) -> list[list[GenerateResult]]:
        async def episode(i: int) -> list[GenerateResult]:
            ids, outs = list(tok.encode(TEXTS[i])), []
            for turn in range(3):
                p = SamplingParams(max_new_tokens=6 + 3 * i + turn, temperature=0.0)
                res = await engine.generate(ids, p, session_id=f"ep{i}" if use_sessions else None)
                outs.append(res)
                ids = ids + res.token_ids + observation[: 3 + i]
            engine.release_session(f"ep{i}")
            return outs

        return list(await asyncio.gather(*(episode(i) for i in range(4))))

    async def body(engine: HFEngine) -> tuple[Any, Any, int]:
        with_reuse = await episodes(engine, True)
        reused = engine.stats["reused_tokens"]
        return with_reuse, await episodes(engine, False), reused

    with_reuse, without, reused = run_async(with_engine(HFEngine, model, tok, body))
    assert reused > 0
    for ep_a, ep_b in zip(with_reuse, without, strict=True):
        for a, b in zip(ep_a, ep_b, strict=True):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_sessions_prefilled_together_with_different_prefixes(tiny: Any) -> None:
    """Second turns of sessions with different cached lengths share one prefill (a cache with
    holes) alongside a fresh prompt; results equal a fresh engine without reuse."""
    model, tok = tiny
    prompts = _prompts(tok)

    async def both() -> tuple[list[GenerateResult], list[GenerateResult], int]:
        engine = HFEngine(model, tok)
        try:
            reused = await sessions_with_holes(engine, tok, prompts, GREEDY, reuse=True)
            plain = await sessions_with_holes(engine, tok, prompts, GREEDY, reuse=False)
            return reused, plain, engine.stats["reused_tokens"]
        finally:
            await engine.close()

    reused, plain, n_reused = run_async(both())
    assert n_reused > 0
    for a, b in zip(reused, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_stop_token_ids_and_stop_strings(tiny: Any) -> None:
    model, tok = tiny
    prompt = _prompts(tok)[1]
    full = reference_greedy(model, prompt, 16)
    stop_id = full[5]
    cut = full.index(stop_id) + 1
    text = tok.decode(full, skip_special_tokens=False)
    stop_str = tok.decode(full[6:8], skip_special_tokens=False)

    async def body(engine: HFEngine) -> tuple[GenerateResult, GenerateResult]:
        by_id = await engine.generate(prompt, SamplingParams(16, 0.0, stop_token_ids=[stop_id]))
        by_str = await engine.generate(prompt, SamplingParams(16, 0.0, stop=[stop_str]))
        return by_id, by_str

    by_id, by_str = run_async(with_engine(HFEngine, model, tok, body))
    assert by_id.token_ids == full[:cut] and by_id.finish_reason == "stop"
    assert by_str.finish_reason == "stop"
    got = tok.decode(by_str.token_ids, skip_special_tokens=False)
    assert stop_str in got and text.startswith(got)
    assert stop_str not in tok.decode(by_str.token_ids[:-1], skip_special_tokens=False)


def test_update_weights_changes_outputs_and_checks_names() -> None:
    model, tok = load_tiny("qwen2")
    prompt = _prompts(tok)[0]
    torch.manual_seed(0)
    new = {n: p.detach() + 0.5 * torch.randn_like(p) for n, p in model.named_parameters()}
    original = model.lm_head.weight.detach().clone()

    async def body(engine: HFEngine) -> tuple[GenerateResult, GenerateResult]:
        before = await engine.generate(prompt, GREEDY, session_id="s")
        with pytest.raises(EngineError):
            engine.update_weights([("no.such.weight", torch.zeros(1))])
        with pytest.raises(EngineError):  # checked before anything is copied
            engine.update_weights([("lm_head.weight", torch.zeros(1)), *new.items()])
        assert torch.equal(model.lm_head.weight, original)
        engine.update_weights(new.items())
        after = await engine.generate(prompt, GREEDY, session_id="s")
        return before, after

    before, after = run_async(with_engine(HFEngine, model, tok, body))
    assert before.token_ids != after.token_ids
    assert after.token_ids == reference_greedy(model, prompt, GREEDY.max_new_tokens)


def test_forward_exception_fails_requests_then_engine_recovers(tiny: Any) -> None:
    model, tok = tiny
    prompts = _prompts(tok)

    async def body(engine: HFEngine) -> tuple[list[GenerateResult], GenerateResult]:
        real = engine._runner.forward
        calls = {"n": 0}

        def flaky(*args: Any, **kw: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("injected forward failure")
            return real(*args, **kw)

        engine._runner.forward = flaky  # type: ignore[method-assign]
        failed = await engine.generate_batch(prompts[:3], GREEDY)
        return failed, await engine.generate(prompts[0], GREEDY)

    failed, ok = run_async(with_engine(HFEngine, model, tok, body))
    assert all(r.finish_reason == "error" for r in failed)
    assert all("injected forward failure" in (r.error or "") for r in failed)
    assert ok.token_ids == reference_greedy(model, prompts[0], GREEDY.max_new_tokens)


def test_nan_logits_fail_their_request_by_name(tiny: Any) -> None:
    """A forward that returns NaN logits for one row (a kernel fault) fails that request with
    an error that says so; argmax would otherwise read NaN as the best token, id 0, and the
    row's companions go on unharmed."""
    model, tok = tiny
    prompts = _prompts(tok)[:3]

    async def body(engine: HFEngine) -> list[GenerateResult]:
        real = engine._runner.forward

        def poisoned(*args: Any, **kw: Any) -> Any:
            logits, cache = real(*args, **kw)
            if logits.shape[0] == len(prompts):
                logits = logits.clone()
                logits[1] = float("nan")
            return logits, cache

        engine._runner.forward = poisoned  # type: ignore[method-assign]
        return await engine.generate_batch(prompts, GREEDY)

    results = run_async(with_engine(HFEngine, model, tok, body))
    assert results[1].finish_reason == "error" and "logits are NaN" in (results[1].error or "")
    for i in (0, 2):
        assert results[i].token_ids == reference_greedy(model, prompts[i], GREEDY.max_new_tokens)


def test_close_aborts_pending_and_rejects_new_requests(tiny: Any) -> None:
    model, tok = tiny
    prompt = _prompts(tok)[0]

    async def body() -> tuple[list[GenerateResult], HFEngine]:
        engine = HFEngine(model, tok, max_batch_size=1)
        params = SamplingParams(max_new_tokens=3000, temperature=0.0)
        tasks = [asyncio.create_task(engine.generate(prompt, params)) for _ in range(3)]
        while engine.stats["decode_steps"] < 2:
            await asyncio.sleep(0.001)
        await engine.close()
        return list(await asyncio.gather(*tasks)), engine

    results, engine = run_async(body())
    assert [r.finish_reason for r in results].count("abort") >= 2
    with pytest.raises(EngineError):
        run_async(engine.generate(prompt, GREEDY))


def test_cancelled_caller_leaves_the_batch_and_loop_stays_responsive(tiny: Any) -> None:
    model, tok = tiny
    prompts = _prompts(tok)

    async def body(engine: HFEngine) -> tuple[GenerateResult, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        long = SamplingParams(max_new_tokens=3000, temperature=0.0)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(engine.generate(prompts[0], long), timeout=0.3)
        res = await engine.generate(prompts[1], GREEDY)
        tick_task.cancel()
        return res, ticks

    res, ticks = run_async(with_engine(HFEngine, model, tok, body))
    assert res.token_ids == reference_greedy(model, _prompts(tok)[1], GREEDY.max_new_tokens)
    assert ticks > 20


def test_request_timeout_and_invalid_requests(tiny: Any) -> None:
    model, tok = tiny
    prompt = _prompts(tok)[0]

    async def body(engine: HFEngine) -> GenerateResult:
        with pytest.raises(EngineError):
            await engine.generate([], GREEDY)
        with pytest.raises(EngineError):
            await engine.generate(prompt, GREEDY, multimodal={"image": object()})
        return await engine.generate(prompt, SamplingParams(3000, 0.0))

    res = run_async(with_engine(HFEngine, model, tok, body, request_timeout_s=0.2))
    assert res.finish_reason == "abort" and "timed out" in (res.error or "")


def test_eos_ids_without_tokenizer(tiny: Any) -> None:
    model, tok = tiny
    prompt = _prompts(tok)[2]

    async def body(engine: HFEngine) -> GenerateResult:
        with pytest.raises(EngineError):
            await engine.generate(prompt, SamplingParams(4, 0.0, stop=["x"]))
        return await engine.generate(prompt, GREEDY)

    res = run_async(with_engine(HFEngine, model, [tok.eos_token_id], body))
    assert res.token_ids == reference_greedy(model, prompt, GREEDY.max_new_tokens)
