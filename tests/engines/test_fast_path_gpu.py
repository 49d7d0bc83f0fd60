"""FastHFEngine on a CUDA GPU with CUDA graphs: exactness in float32, tolerance in bf16.

Models are built from configs (no tokenizer, no files), so the tests run on a bare machine.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from engine_helpers import gpu_model, rescore

from agentrl.config import FastHFTuning
from agentrl.engines import SamplingParams
from agentrl.engines.hf_fast import FastHFEngine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1024, (int(8 + 7 * i),), generator=gen).tolist() for i in range(n)]


def _generate_ref(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt], device="cuda")
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


def _batch(engine: FastHFEngine, prompts: list[list[int]], params: SamplingParams) -> Any:
    async def body() -> Any:
        try:
            return await engine.generate_batch(prompts, params)
        finally:
            await engine.close()

    return asyncio.run(asyncio.wait_for(body(), timeout=300))


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_graphs_fp32_greedy_identical_to_generate(kind: str) -> None:
    model = gpu_model(kind, torch.float32)
    prompts = _prompts(6)
    engine = FastHFEngine(model, [], max_batch_size=8, max_seq_len=512)
    results = _batch(engine, prompts, SamplingParams(max_new_tokens=40, temperature=0.0))
    assert engine.captured_graphs > 0
    for prompt, res in zip(prompts, results, strict=True):
        assert res.token_ids == _generate_ref(model, prompt, 40)
        expected = rescore(model, prompt, res.token_ids, 0)
        assert res.logprobs == pytest.approx(expected, abs=1e-3)


def test_graphs_match_eager_and_sampled_logprobs_fp32() -> None:
    model = gpu_model("qwen2", torch.float32)
    prompts = _prompts(5, seed=1)
    params = SamplingParams(max_new_tokens=32, temperature=0.9, top_p=0.95, top_k=40, seed=5)
    graphs = _batch(FastHFEngine(model, [], max_batch_size=8, max_seq_len=512), prompts, params)
    eager = _batch(
        FastHFEngine(
            model, [], max_batch_size=8, max_seq_len=512, tuning=FastHFTuning(cuda_graphs=False)
        ),
        prompts,
        params,
    )
    for prompt, g, e in zip(prompts, graphs, eager, strict=True):
        assert g.token_ids == e.token_ids
        assert g.logprobs == pytest.approx(rescore(model, prompt, g.token_ids, 0.9), abs=1e-3)


def test_bf16_sampled_logprobs_within_tolerance() -> None:
    model = gpu_model("qwen2", torch.bfloat16)
    prompts = _prompts(8, seed=2)
    params = SamplingParams(max_new_tokens=48, temperature=1.0, seed=11)
    results = _batch(FastHFEngine(model, [], max_batch_size=16), prompts, params)
    diffs = []
    for prompt, res in zip(prompts, results, strict=True):
        expected = rescore(model, prompt, res.token_ids, 1.0)
        diffs += [abs(a - b) for a, b in zip(res.logprobs, expected, strict=True)]
    assert len(diffs) == 8 * 48
    assert sum(diffs) / len(diffs) < 0.05 and max(diffs) < 0.3, (
        sum(diffs) / len(diffs),
        max(diffs),
    )


def test_sessions_weights_and_sleep_with_graphs() -> None:
    model = gpu_model("qwen2", torch.float32)
    base = _prompts(1, seed=3)[0]
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    engine = FastHFEngine(model, [], max_batch_size=4, max_seq_len=512)

    async def episode(session: str | None) -> list[list[int]]:
        ids, outs = list(base), []
        for turn in range(3):
            res = await engine.generate(ids, greedy, session_id=session)
            outs.append(res.token_ids)
            ids = ids + res.token_ids + [100 + turn, 200 + turn, 300 + turn]
        return outs

    async def body() -> None:
        reused = await episode("ep")
        assert engine.stats["reused_tokens"] > 0
        assert reused == await episode(None)
        state = {k: v * 0.5 for k, v in model.state_dict().items() if "mlp.down" in k}
        engine.update_weights(state.items())  # graphs read the same tensors: no re-capture
        first = (await engine.generate(base, greedy)).logprobs
        assert first == pytest.approx(
            rescore(model, base, _generate_ref(model, base, 12), 0), abs=1e-3
        )
        engine.sleep()
        engine.wake()
        again = await engine.generate(base, greedy)
        assert again.logprobs == pytest.approx(first, abs=1e-5)
        await engine.close()

    asyncio.run(asyncio.wait_for(body(), timeout=300))
