"""What a weight update does to a parked multi-turn session's KV (`engine.hf.keep_kv_on_update`).

Kept (the default, PipelineRL style): the session's next turn prefills only its new suffix,
under the new weights, attending to the keys/values the old weights computed. The reference
is plain transformers doing exactly that: the old model's cache over the prefix, then the
new model greedy from there. Dropped: the next turn equals the new model from scratch.
Both hf engines (HFEngine, and FastHFEngine's eager path on CPU) must agree with it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from engine_helpers import load_tiny, reference_greedy, run_async

from agentrl.engines import SamplingParams
from agentrl.engines.build import make_hf_engine

TURN1 = SamplingParams(max_new_tokens=6, temperature=0.0)
TURN2 = SamplingParams(max_new_tokens=8, temperature=0.0)


def _new_weights(model: Any) -> Any:
    new = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in new.named_parameters():
            if "mlp" in name:
                p.mul_(1.5)
    return new


def _greedy_after_cache(old: Any, new: Any, prefix: list[int], suffix: list[int], n: int) -> Any:
    """Old model's KV over `prefix`, then the new model prefills `suffix` and decodes `n`
    greedy tokens; returns the tokens and their logprobs."""
    with torch.no_grad():
        cache = old(input_ids=torch.tensor([prefix]), use_cache=True).past_key_values
        ids, tokens, logps = suffix, [], []
        for _ in range(n):
            out = new(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            tok = int(logp.argmax())
            tokens.append(tok)
            logps.append(float(logp[tok]))
            ids = [tok]
    return tokens, logps


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("keep", [True, False])
def test_session_kv_across_a_weight_update(fast: bool, keep: bool) -> None:
    model, tok = load_tiny("qwen2")
    model.generation_config.eos_token_id = None
    new = _new_weights(model)
    new.generation_config.eos_token_id = None
    prompt = tok.encode("What is 3 + 4? Use the calculator.")
    obs = tok.encode(" <tool_response>7</tool_response> so the answer is")
    engine = make_hf_engine(
        copy.deepcopy(model), [], fast=fast, max_batch_size=4, keep_kv_on_update=keep
    )

    async def body() -> Any:
        try:
            first = await engine.generate(prompt, TURN1, session_id="ep")
            engine.update_weights(new.state_dict().items())
            reused = engine.stats["reused_tokens"]
            second_prompt = prompt + first.token_ids + obs
            second = await engine.generate(second_prompt, TURN2, session_id="ep")
            return first, second, second_prompt, engine.stats["reused_tokens"] - reused
        finally:
            await engine.close()

    first, second, second_prompt, reused = run_async(body())
    assert first.token_ids == reference_greedy(model, prompt, TURN1.max_new_tokens)
    assert second.weight_versions == [1] * len(second.token_ids)
    if keep:
        # The cache holds prompt + first output minus its last token (never fed back).
        cached = len(prompt) + len(first.token_ids) - 1
        assert reused == cached
        want, logps = _greedy_after_cache(
            model, new, second_prompt[:cached], second_prompt[cached:], TURN2.max_new_tokens
        )
        assert second.token_ids == want
        assert second.logprobs == pytest.approx(logps, abs=1e-4)
        # ...which the new weights' own cache would not give (the check can tell them apart).
        _, recomputed = _greedy_after_cache(
            new, new, second_prompt[:cached], second_prompt[cached:], TURN2.max_new_tokens
        )
        assert max(abs(a - b) for a, b in zip(logps, recomputed, strict=True)) > 1e-3
    else:
        assert reused == 0
        assert second.token_ids == reference_greedy(new, second_prompt, TURN2.max_new_tokens)


@pytest.mark.parametrize(
    ("overrides", "keep"),
    [
        ([], False),  # the synchronous loop: no session spans an update
        (["trainer.async.max_staleness=1"], True),  # pipelined: PipelineRL style
        (["trainer.async.max_staleness=1", "engine.hf.keep_kv_on_update=false"], False),
        (["engine.hf.keep_kv_on_update=true"], True),
    ],
)
def test_null_resolves_by_the_pipeline(overrides: list[str], keep: bool) -> None:
    from agentrl.assembly.build import build_engine_for
    from agentrl.config import TrainConfig, load_config

    cfg = load_config(TrainConfig, None, overrides)
    model, tok = load_tiny("qwen2")
    engine = build_engine_for(cfg, model, tok, torch.device("cpu"))
    assert engine.keep_kv_on_update is keep
