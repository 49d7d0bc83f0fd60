"""Per-token weight versions (the "weight_versions" engine feature that `trainer.async` reads):
a weight update while a request decodes lands between two decode steps, and the tokens sampled
after it carry the new version (PipelineRL's in-flight update)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from engine_helpers import load_tiny, run_async, with_engine

from agentrl.engines import HFEngine, SamplingParams


def test_update_between_decode_steps_shows_in_token_versions() -> None:
    model, tok = load_tiny("qwen2")
    prompt = tok.encode("count with me: one two three")
    third = threading.Event()

    def on_token(token: int, lp: float, top: list) -> None:  # engine thread, under its lock
        third.set()

    params = SamplingParams(max_new_tokens=24, temperature=0.0, on_token=on_token)
    weights = [(k, v.detach().clone()) for k, v in model.state_dict().items()]

    async def body(engine: HFEngine) -> list:
        assert "weight_versions" in engine.features and engine.weight_version == 0
        before = await engine.generate(prompt, SamplingParams(max_new_tokens=4, temperature=0))
        assert before.weight_versions == [0] * len(before.token_ids)
        third.clear()
        request = asyncio.ensure_future(engine.generate(prompt, params))

        def swap() -> None:  # the trainer's thread: blocks until the step in flight ends
            assert third.wait(timeout=60)
            engine.update_weights(weights)

        await asyncio.gather(request, asyncio.to_thread(swap))
        return [request.result(), engine.weight_version]

    res, version = run_async(with_engine(HFEngine, model, tok, body))
    assert version == 1
    vs = res.weight_versions
    assert len(vs) == len(res.token_ids) == len(res.logprobs)
    assert vs == sorted(vs) and vs[0] == 0
    if res.finish_reason == "length":  # decoding outlived the swap: later tokens are new
        assert vs[-1] == 1


def test_fast_engine_declares_weight_versions() -> None:
    fast = pytest.importorskip("agentrl.engines.hf_fast")
    assert "weight_versions" in fast.FastHFEngine.features
