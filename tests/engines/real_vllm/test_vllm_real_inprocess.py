"""Real vLLM, in-process `AsyncLLM` (`engine.kind: vllm`), on CPU: token ids in and out,
logprobs equal to a transformers re-score, greedy equal to the hf engine, exact logprobs
after weight updates (tied embeddings, LoRA-merged), sleep/wake where the platform has no
sleep mode, timeouts, and a clear refusal of head sizes CPU attention cannot run."""

from __future__ import annotations

import asyncio
import glob
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import vllm_checks as checks

from agentrl.config.schema import EngineConfig
from agentrl.engines import EngineError, SamplingParams, build_engine
from agentrl.engines._vllm_sync import SyncPath

pytestmark = checks.MARKS


@pytest.fixture(scope="module")
def engine(small_path: str, small_model: Any, loop: Any) -> Iterator[Any]:
    cfg = EngineConfig(kind="vllm", extra=dict(checks.ENGINE_EXTRA))
    engine = build_engine(cfg, small_path, small_model[1])
    yield engine
    checks.run(loop, engine.close())


@pytest.fixture
def restore(engine: Any, small_model: Any) -> Iterator[None]:
    """Tests that change the engine's weights put the checkpoint's back afterwards."""
    yield
    engine.update_weights(small_model[0].state_dict().items())


def test_platform_options_chosen(engine: Any) -> None:
    from agentrl.engines.vllm import VLLMEngine

    assert isinstance(engine, VLLMEngine)
    assert engine.sleep_mode is False  # CPU: vLLM has no sleep mode here
    # vLLM 0.32's RL API: its weight transfer, in-place pause, labelled tokens (`_vllm_sync`)
    assert engine.sync == SyncPath("native", "keep")
    # ... and its weight transfer, through agentrl's backend (vLLM's own are GPU-only).
    assert engine.llm.vllm_config.weight_transfer_config.backend == "agentrl_file"


def test_token_in_token_out(engine: Any, small_model: Any, loop: Any) -> None:
    checks.token_in_token_out(loop, engine, small_model[1])


def test_logprobs_equal_transformers_rescore(engine: Any, small_model: Any, loop: Any) -> None:
    checks.logprobs_match_rescore(loop, engine, *small_model)


def test_greedy_identical_to_hf_engine(engine: Any, small_model: Any, loop: Any) -> None:
    checks.greedy_matches_hf(loop, engine, *small_model)


def test_update_weights_then_exact_logprobs(
    engine: Any, small_model: Any, loop: Any, restore: None
) -> None:
    model, tok = small_model
    for seed in (1, 2):  # twice: the second update replaces the first, not the checkpoint
        new = checks.perturbed(model, seed)
        assert new.lm_head.weight.data_ptr() == new.model.embed_tokens.weight.data_ptr()
        t0 = time.perf_counter()
        engine.update_weights(new.state_dict().items())  # tied: both names, one storage
        assert time.perf_counter() - t0 < 120
        checks.logprobs_under(loop, engine, new, tok)
        # The weights went through a scratch file (in /dev/shm), deleted once loaded.
        assert not glob.glob(f"/dev/shm/agentrl-weights-{os.getpid()}-*")


def test_update_mid_request_continues_with_exact_versions(
    engine: Any, small_model: Any, loop: Any, restore: None
) -> None:
    checks.update_mid_request_keeps_exact_versions(loop, engine, *small_model)


@pytest.mark.parametrize(
    "path",
    [SyncPath("native", "abort"), SyncPath("rpc", "abort")],
    ids=["vllm-0.26-transfer-no-labels", "older-vllm-rpc"],
)
def test_update_mid_request_abort_mode_segments(
    engine: Any, small_model: Any, loop: Any, restore: None, path: SyncPath
) -> None:
    """The paths of a vLLM without per-token weight labels, on this real engine: pause mode
    "abort", each interrupted request continued as a new segment (`_versioned`), stamps as
    exact; the weights through vLLM's transfer phases with no label (vLLM 0.26.0's
    `finish_weight_update()`) or through agentrl's worker extension (an older vLLM)."""
    engine.sync = path
    try:
        checks.update_mid_request_keeps_exact_versions(loop, engine, *small_model)
        new = checks.perturbed(small_model[0], 5)
        engine.update_weights(new.state_dict().items())
        checks.logprobs_under(loop, engine, new, small_model[1])
    finally:
        engine.sync = SyncPath("native", "keep")


def test_update_weights_lora_merged(
    engine: Any, small_model: Any, loop: Any, restore: None
) -> None:
    merged, weights = checks.lora_merged(small_model[0], seed=3)
    engine.update_weights(weights)
    checks.logprobs_under(loop, engine, merged, small_model[1])


def test_update_weights_from_sync_code_before_any_request(
    small_path: str, engine: Any, small_model: Any
) -> None:
    """As the trainer does after SFT: a sync call, then requests on a brand-new loop."""
    new = checks.perturbed(small_model[0], 4)
    engine.update_weights(new.state_dict().items())
    try:
        fresh = asyncio.new_event_loop()
        try:
            checks.logprobs_under(fresh, engine, new, small_model[1])
        finally:
            fresh.close()
    finally:
        engine.update_weights(small_model[0].state_dict().items())


def test_update_weights_unknown_name_is_a_clear_error(engine: Any, small_model: Any) -> None:
    import torch

    with pytest.raises(EngineError, match="update_weights refused.*unknown names"):
        engine.update_weights([("model.no_such_layer.weight", torch.zeros(2, 2))])
    checks.token_in_token_out(asyncio.new_event_loop(), engine, small_model[1])


def test_sleep_wake_are_noops_without_sleep_mode(engine: Any, small_model: Any, loop: Any) -> None:
    engine.sleep()
    checks.token_in_token_out(loop, engine, small_model[1])  # would block if vLLM paused
    engine.wake()
    checks.token_in_token_out(loop, engine, small_model[1])


def test_request_timeout_aborts_and_engine_survives(
    engine: Any, small_model: Any, loop: Any
) -> None:
    tok = small_model[1]
    engine.request_timeout_s = 1e-3
    try:
        res = checks.run(loop, engine.generate(tok.encode("a"), SamplingParams(200)))
    finally:
        engine.request_timeout_s = None
    assert res.finish_reason == "abort" and "timed out" in (res.error or "")
    checks.token_in_token_out(loop, engine, tok)


def test_episode_with_timed_out_engine_records_error(engine: Any, small_model: Any) -> None:
    from agentrl.chat import ChatFormat
    from agentrl.config.schema import RolloutConfig, SamplingConfig
    from agentrl.envs import make
    from agentrl.rollout import RolloutRunner

    tok = small_model[1]
    runner = RolloutRunner(
        engine,
        ChatFormat(tok, "hermes"),
        lambda: make("math/calc-easy-v0"),
        RolloutConfig(n=1, max_turns=2, max_total_tokens=512, episode_timeout_s=60),
        SamplingConfig(max_new_tokens=32),
    )
    engine.request_timeout_s = 1e-3
    try:
        groups = runner.collect_sync([0, 1], 1)
    finally:
        engine.request_timeout_s = None
        runner.close()
    trajs = [t for g in groups for t in g.trajectories]
    assert len(trajs) == 2
    for t in trajs:
        assert t.termination == "engine_error" and "timed out" in t.metadata["error"]


def test_head_dim_16_refused_before_start(loop: Any) -> None:
    from engine_helpers import CACHE

    from agentrl.models.tiny import build_tiny

    path = str(build_tiny("qwen2", str(CACHE)))
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match="head_dim 16"):
        build_engine(EngineConfig(kind="vllm", extra=dict(checks.ENGINE_EXTRA)), path, None)
    assert time.perf_counter() - t0 < 60  # refused up front, no engine started


@checks.every_sync_path()
def test_a_load_that_fails_midway_is_an_error_and_the_next_update_recovers(
    engine: Any, small_model: Any, loop: Any, restore: None, path: SyncPath
) -> None:
    """A chunk that cannot be read (here a file gone before the workers load it) fails inside
    vLLM's phases, after `start_weight_update` began a layer-wise reload
    (`checks.failed_load_recovers`)."""
    engine.sync = path
    try:
        missing = "/nonexistent/agentrl-weights.safetensors"
        fail = lambda: engine._load_file(missing)  # noqa: E731, SLF001
        checks.failed_load_recovers(loop, engine, fail, *small_model, seed=9)
    finally:
        engine.sync = SyncPath("native", "keep")
