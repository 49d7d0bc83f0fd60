"""`SimpleTorchEngine`: the plainest correct Engine, a per-request decode loop over a real
transformers model. Tests use it as the reference the rollout must be token-exact against
(and as a stand-in wherever the batching HF engine is not the subject)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from agentrl.engines.base import Engine, GenerateResult, SamplingParams


class SimpleTorchEngine(Engine):
    """One request at a time (a lock), each decoded with the model's KV cache in a thread.

    Logprobs are log_softmax(logits / T) of the sampled token, before top-k/top-p filtering
    (the distribution the trainer recomputes); T == 0 samples greedily.
    """

    def __init__(self, model: Any, eos_ids: Iterable[int] = ()) -> None:
        self.model = model.eval()
        self.eos_ids = set(eos_ids)
        self.lock = threading.Lock()
        self.calls = 0
        # transformers 5 renamed `past_key_values` to `cache`; accept both.
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        self.calls += 1
        return await asyncio.to_thread(self._generate, list(prompt_ids), params)

    @torch.no_grad()
    def _generate(self, prompt: list[int], p: SamplingParams) -> GenerateResult:
        seed = p.seed if p.seed is not None else int(torch.randint(0, 2**62, (1,)))
        gen = torch.Generator().manual_seed(seed)
        stops = self.eos_ids | set(p.stop_token_ids)
        out: list[int] = []
        lps: list[float] = []
        with self.lock:
            ids = torch.tensor([prompt])
            past = None
            for _ in range(p.max_new_tokens):
                res = self.model(input_ids=ids, use_cache=True, **{self.cache_kw: past})
                past = res[self.cache_kw]
                logits = res.logits[0, -1].float()
                token, lp = _sample(logits, p, gen)
                out.append(token)
                lps.append(lp)
                if token in stops:
                    return GenerateResult(out, lps, "stop")
                ids = torch.tensor([[token]])
        return GenerateResult(out, lps, "length")

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        self.model.load_state_dict(dict(named_tensors), strict=False)


def _sample(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> tuple[int, float]:
    if p.temperature <= 0:
        logp = torch.log_softmax(logits, -1)
        token = int(logp.argmax())
        return token, float(logp[token])
    logp = torch.log_softmax(logits / p.temperature, -1)
    probs = logp.exp()
    if p.top_k > 0:
        kth = probs.topk(min(p.top_k, probs.numel())).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if p.top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        drop = (sorted_p.cumsum(0) - sorted_p) >= p.top_p
        sorted_p[drop] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
    token = int(torch.multinomial(probs / probs.sum(), 1, generator=gen))
    return token, float(logp[token])


class ScriptedEngine(Engine):
    """Replies with scripted texts in turn (then the last one forever), as the ids the chat
    format encodes plus its first stop token, logprob 0. For tests whose subject is the env or
    tool side, where a sampling model would make the calls random."""

    def __init__(self, chat: Any, replies: Sequence[str], delay_s: float = 0.0) -> None:
        self.chat, self.replies, self.delay_s = chat, list(replies), delay_s
        self.turns: dict[str | None, int] = {}
        self.prompts: list[list[int]] = []

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        self.prompts.append(list(prompt_ids))
        k = self.turns.get(session_id, 0)
        self.turns[session_id] = k + 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        text = self.replies[min(k, len(self.replies) - 1)]
        ids = [*self.chat.encode(text), self.chat.end_of_turn_id]
        finish = "stop"
        if len(ids) > params.max_new_tokens:
            ids, finish = ids[: params.max_new_tokens], "length"
        return GenerateResult(ids, [0.0] * len(ids), finish)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        pass


class Recorder(Engine):
    """Wraps an engine and keeps every (prompt, result) per session."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.log: dict[str | None, list[tuple[list[int], GenerateResult]]] = defaultdict(list)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, **kw: Any
    ) -> GenerateResult:
        out = await self.inner.generate(prompt_ids, params, **kw)
        self.log[kw.get("session_id")].append((list(prompt_ids), out))
        return out

    def update_weights(self, named_tensors: Any) -> None:
        self.inner.update_weights(named_tensors)
