"""The hf engine's per-request hooks: a `TokenConstraint` (logits mask / forced tokens),
`top_logprobs` and `on_token`, on the real tiny model. A mask changes what is sampled, never
the recorded logprob (still the model's own, as the trainer recomputes it); a constraint
that breaks fails its own request only."""

from __future__ import annotations

import asyncio
from typing import Any

import torch
from engine_helpers import rescore, run_async

from agentrl.engines.base import SamplingParams, TokenConstraint
from agentrl.engines.hf import HFEngine


class Forced(TokenConstraint):
    """Only the next token of `ids` is allowed (a forced prefix), then anything."""

    def __init__(self, ids: list[int], vocab: int) -> None:
        self.ids, self.vocab, self.pos = ids, vocab, 0

    def allowed(self) -> Any:
        if self.pos >= len(self.ids):
            return None
        mask = torch.zeros(self.vocab, dtype=torch.bool)
        mask[self.ids[self.pos]] = True
        return mask

    def accept(self, token_id: int) -> None:
        assert self.pos >= len(self.ids) or token_id == self.ids[self.pos]
        self.pos += 1


class Broken(TokenConstraint):
    def allowed(self) -> Any:
        raise ValueError("grammar exploded")

    def accept(self, token_id: int) -> None:
        pass


def test_forced_tokens_keep_the_model_logprobs(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    prompt = tok.encode("What is 3 + 4?")
    forced = tok.encode(" the answer")
    vocab = model.config.vocab_size
    seen: list[tuple[int, float]] = []

    async def body() -> Any:
        engine = HFEngine(model, tok)
        try:
            for temperature in (0.0, 0.9):
                params = SamplingParams(
                    max_new_tokens=len(forced) + 3,
                    temperature=temperature,
                    seed=1,
                    constraint=Forced(forced, vocab),
                    top_logprobs=4,
                    on_token=lambda t, lp, top: seen.append((t, lp)),
                )
                out = await engine.generate(prompt, params)
                assert out.token_ids[: len(forced)] == forced
                want = rescore(model, prompt, out.token_ids, temperature)
                torch.testing.assert_close(out.logprobs, want, atol=1e-4, rtol=0)
                assert len(out.top_logprobs) == len(out.token_ids)
                for row, lp in zip(out.top_logprobs, out.logprobs, strict=True):
                    assert row[0][1] >= lp - 1e-6
                if temperature == 0.0:  # unforced greedy tokens are the top-1
                    free = out.top_logprobs[len(forced) :]
                    assert [row[0][0] for row in free] == out.token_ids[len(forced) :]
                assert seen[-len(out.token_ids) :] == list(
                    zip(out.token_ids, out.logprobs, strict=True)
                )
        finally:
            await engine.close()

    run_async(body())


def test_a_broken_constraint_fails_only_its_request(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    prompt = tok.encode("def f(x): return")

    async def body() -> Any:
        engine = HFEngine(model, tok, max_batch_size=4)
        try:
            good = SamplingParams(max_new_tokens=6, temperature=0.0)
            bad = SamplingParams(max_new_tokens=6, temperature=0.0, constraint=Broken())
            return await asyncio.gather(engine.generate(prompt, good), engine.generate(prompt, bad))
        finally:
            await engine.close()

    ok, failed = run_async(body())
    assert ok.finish_reason in ("stop", "length") and ok.token_ids
    assert failed.finish_reason == "error" and "grammar exploded" in (failed.error or "")
