"""Real vLLM, in-process `AsyncLLM` (`engine.kind: vllm`), on CPU: token ids in and out,
logprobs equal to a transformers re-score, greedy equal to the hf engine, exact logprobs
after weight updates (tied embeddings, LoRA-merged), sleep/wake where the platform has no
sleep mode, timeouts, and a clear refusal of head sizes CPU attention cannot run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import vllm_checks as checks

from agentrl.config.schema import EngineConfig
from agentrl.engines import EngineError, SamplingParams, build_engine

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


def test_update_mid_request_continues_with_exact_versions(
    engine: Any, small_model: Any, loop: Any, restore: None
) -> None:
    """A pipelined trainer (`trainer.async`) updates the weights while requests run: vLLM
    pauses them between two steps, and each continues under the new weights. Every token is
    stamped with the update count of the weights that sampled it, and the stamps are exact:
    each token's log-prob equals a transformers re-score under the weights of its stamp
    (old and new weights far enough apart that the two re-scores differ)."""
    import threading

    model, tok = small_model
    new = checks.perturbed(model, 6, scale=0.5)
    params = [SamplingParams(max_new_tokens=400, temperature=1.0, seed=50 + i) for i in range(4)]
    prompts = [tok.encode(f"Count to {i}:") for i in range(4)]
    before = engine.weight_version
    t0 = time.perf_counter()
    checks.run(loop, engine.generate(prompts[0], params[0]))  # how long one request takes
    alone = time.perf_counter() - t0
    results: list[Any] = []

    async def together() -> list[Any]:
        calls = (engine.generate(p, s) for p, s in zip(prompts, params, strict=True))
        return list(await asyncio.gather(*calls))

    def requests() -> None:
        results.extend(checks.run(loop, together()))

    worker = threading.Thread(target=requests)
    worker.start()
    time.sleep(max(0.05, alone / 3))  # a third of the way in
    engine.update_weights(new.state_dict().items())
    worker.join(timeout=300)
    assert engine.weight_version == before + 1 and len(results) == 4
    spanning = 0
    for prompt, r in zip(prompts, results, strict=True):
        assert r.error is None and r.finish_reason in ("stop", "length"), r
        assert len(r.weight_versions) == len(r.token_ids) == len(r.logprobs)
        assert r.weight_versions == sorted(r.weight_versions)
        assert set(r.weight_versions) <= {before, before + 1}
        old_lp = checks.rescore(model, prompt, r.token_ids, 1.0)
        new_lp = checks.rescore(new, prompt, r.token_ids, 1.0)
        for v, lp, a, b in zip(r.weight_versions, r.logprobs, old_lp, new_lp, strict=True):
            assert lp == pytest.approx(b if v == before + 1 else a, abs=2e-3), (v, lp, a, b)
        apart = sum(abs(a - b) > 2e-2 for a, b in zip(old_lp, new_lp, strict=True))
        assert apart > len(old_lp) // 2  # the check tells the two weights apart
        spanning += len(set(r.weight_versions)) == 2
    assert spanning >= 1, [len(r.token_ids) for r in results]
    # Requests after the update run on the new weights from their first token.
    after = checks.run(loop, engine.generate(prompts[1], SamplingParams(max_new_tokens=8)))
    assert after.weight_versions == [before + 1] * len(after.token_ids)


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
