"""Helpers for engine tests: tiny models, shared prompts, running an engine under asyncio,
and reference outputs from plain transformers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import torch

from agentrl.engines import Engine, GenerateResult, SamplingParams

CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))

# Prompts of different lengths (one a single token) so batches are ragged.
TEXTS = [
    "What is 3 + 4?",
    "The result of this expression : 12 * 7 - 5 is",
    "def f(x): return",
    "a",
    "You are a helpful assistant . Use the tools to solve the problem , then answer .",
]
GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


def run_async(coro: Awaitable[Any]) -> Any:
    """Run a test coroutine with a timeout, so a hung engine fails the test, not the run."""
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def with_engine(
    engine_cls: Callable[..., Engine],
    model: Any,
    tok: Any,
    body: Callable[[Any], Awaitable[Any]],
    **kw: Any,
) -> Any:
    """`body(engine)` on a fresh `engine_cls(model, tok, **kw)`, closed afterwards."""
    engine = engine_cls(model, tok, **kw)
    try:
        return await body(engine)
    finally:
        await engine.close()


def load_tiny(preset: str, **load: Any) -> tuple[Any, Any]:
    """The preset in float32; `load`: more `from_pretrained` arguments (attn_implementation)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.models.tiny import build_tiny

    path = build_tiny(preset, str(CACHE))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **load).eval()
    return model, AutoTokenizer.from_pretrained(path)


async def sessions_with_holes(
    engine: Any, tok: Any, prompts: list[list[int]], last: SamplingParams, reuse: bool
) -> list[GenerateResult]:
    """Three sessions' first turns (different lengths), then their second turns prefilled
    together, a cache laid out [pad][prefix][pad][suffix] when `reuse`, beside the fresh
    `prompts[3]` (second turns and it sampled with `last`): every result, first turns first."""
    obs = tok.encode("<tool_response>7</tool_response>")
    sid = [f"s{i}" if reuse else None for i in range(3)]
    firsts = await asyncio.gather(
        *(
            engine.generate(prompts[i], SamplingParams(4 + 5 * i, 0.0), session_id=sid[i])
            for i in range(3)
        )
    )
    seconds = [prompts[i] + firsts[i].token_ids + obs[: 2 + 3 * i] for i in range(3)]
    calls = [engine.generate(seconds[i], last, session_id=sid[i]) for i in range(3)]
    return [*firsts, *await asyncio.gather(*calls, engine.generate(prompts[3], last))]


def reference_greedy(model: Any, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Unpadded single-prompt `model.generate` (EOS ends it, as in the engine)."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=model.config.pad_token_id,
    )
    return out[0, len(prompt) :].tolist()


def rescore(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """log p(output[i]) from one full forward over prompt+output, temperature-scaled."""
    ids = torch.tensor([prompt + output], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float().cpu()
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    return logp.gather(-1, torch.tensor(output)[:, None]).squeeze(-1).tolist()


def real_engine_vs_rescore(kind: str) -> tuple[GenerateResult, list[float]]:
    """A real vllm/sglang engine's sampled result on the tiny qwen2 model, and the logprobs
    a plain transformers forward gives those tokens (what the engine's must match)."""
    from agentrl.config.schema import EngineConfig
    from agentrl.engines import build_engine

    model, tok = load_tiny("qwen2")
    engine = build_engine(EngineConfig(kind=kind, gpu_memory_utilization=0.2), model, tok)
    prompt = tok.encode("What is 3 + 4?")
    res = asyncio.run(engine.generate(prompt, SamplingParams(16, temperature=0.8, seed=0)))
    return res, rescore(model, prompt, res.token_ids, 0.8)


def gpu_model(kind: str, dtype: torch.dtype) -> Any:
    """A small random-init CUDA model of `kind` built from a config (GPU tests), EOS off."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(
        kind,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to("cuda", dtype).eval()
    model.generation_config.eos_token_id = None
    return model
