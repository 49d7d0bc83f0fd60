"""The engine interface: token ids in, token ids + logprobs out.

Engines never see text. The rollout renders prompts to ids with the tokenizer's own chat
template and appends exactly the ids the engine returns, so there is nothing to re-tokenize
and nothing to drift. Every engine (hf, vllm, sglang) implements this one ABC.

Concurrency model: callers `await engine.generate(...)` once per request, from many episodes
at once; an engine batches concurrent requests internally (the hf engine joins them into its
running batch between decode steps).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort", "error"]
# What `generate(multimodal=...)` takes: nothing (text-only), raw images (the backend runs its
# own processor: vllm, sglang), or the processor's outputs (pixel_values + image_grid_thw).
MultimodalInputs = Literal["none", "images", "processed"]


@dataclass
class SamplingParams:
    """Per-request sampling. `temperature == 0` means greedy."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    # Stop strings end generation once the decoded text contains one; the stop string's
    # tokens are kept (they are what the model sampled).
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    # Constrained decoding (a grammar, a forced tool-call prefix): which tokens may come next.
    # Needs the engine's "constraint" feature.
    constraint: TokenConstraint | None = None
    # Also return the k most likely tokens at each position (the "top_logprobs" feature).
    top_logprobs: int = 0
    # Called as each token is sampled with (token id, logprob, top_logprobs pairs), from the
    # engine's own thread (the "stream" feature): keep it quick and thread-safe (e.g.
    # `loop.call_soon_threadsafe`).
    on_token: Callable[[int, float, list[tuple[int, float]]], None] | None = None
    # Called once, with no arguments, when the engine gives the request a batch slot (the
    # "admission" feature), on the event loop that called `generate`: the time before it is
    # the request's wait in the engine's queue, which the episode clock does not count.
    # A request that ends unadmitted (aborted, timed out, failed) may never call it.
    on_admit: Callable[[], None] | None = None


class TokenConstraint(ABC):
    """Per-request restriction of the next token, kept in step with what was sampled.

    Masking changes only which token is *chosen*: the recorded logprob stays the model's own
    (see `GenerateResult`), so the trainer's recomputation still matches it. One instance
    serves one request (it is stateful)."""

    @abstractmethod
    def allowed(self) -> Any:
        """A bool tensor over the vocabulary (True = may be sampled next), or None for no
        restriction at this position. Raising fails this request only."""

    @abstractmethod
    def accept(self, token_id: int) -> None:
        """Advance past the token just sampled."""


@dataclass
class GenerateResult:
    """What one request produced. `logprobs[i]` is log p(token_ids[i]) under the sampling
    distribution's *model* logits (temperature-scaled), as the trainer will recompute it."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    error: str | None = None
    # With `SamplingParams.top_logprobs = k`: per position, the k (token id, logprob) pairs
    # of highest logprob, from the same distribution as `logprobs`.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    # With the "weight_versions" feature: per token, how many `update_weights` calls the
    # weights that sampled it had seen (a swap between decode steps shows mid-request).
    weight_versions: list[int] = field(default_factory=list)


class EngineError(RuntimeError):
    """The engine failed a request; the rollout records it on the trajectory."""


def error_result(exc: BaseException) -> GenerateResult:
    """A request that failed inside the engine, as a result the rollout records on the
    trajectory (one bad request must not take the whole batch down)."""
    return GenerateResult([], [], "error", f"{type(exc).__name__}: {exc}")


class Engine(ABC):
    """A generation backend. What it can do beyond `generate` is declared here, once, and
    callers read these declarations instead of probing the object:

    - `features`: the optional `SamplingParams` it honours ("constraint", "top_logprobs",
      "stream" for `on_token`, "admission" for `on_admit`, "weight_versions": results carry
      each token's weight version, `weight_version` counts updates); callers reject what is
      missing.
    - `multimodal_inputs`: what `generate(multimodal=...)` takes (see `MultimodalInputs`).
    - `can_sleep`: `sleep()` frees accelerator memory and `wake()` restores it; when False
      both are no-ops (`engine.sleep_between_phases` refuses such an engine).
    - `precapture()`: capture ahead-of-time state (the fast path's CUDA graphs); 0 elsewhere.
    - `calls_transformers_modules`: its forward runs transformers' module forwards in this
      process. Those go through the `kernels` hub layer, whose context variable turns
      process-global while compiled code runs, so such an engine on a thread beside a
      compiled update races with it (`assembly.build_engine_for` refuses the combination).
    """

    features: frozenset[str] = frozenset()
    multimodal_inputs: MultimodalInputs = "none"
    can_sleep: bool = False
    calls_transformers_modules: bool = False

    @abstractmethod
    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        """Sample a continuation of `prompt_ids`.

        `session_id` groups the turns of one episode so an engine may reuse the KV cache of
        the shared prefix; `multimodal` carries processor outputs for VLMs.
        """

    async def generate_batch(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[GenerateResult]:
        """Convenience: many prompts, same params (engines batch them internally)."""
        return list(await asyncio.gather(*(self.generate(p, params) for p in prompts)))

    @property
    def weight_version(self) -> int:
        """How many `update_weights` calls the engine has applied ("weight_versions" engines;
        0 for the rest)."""
        return 0

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Load new policy weights (HF parameter names) so the next request uses them."""

    def release_session(self, session_id: str) -> None:
        """Forget cached state of a finished episode."""

    def sleep(self) -> None:
        """Free accelerator memory between rollouts (engines with `can_sleep`)."""

    def wake(self) -> None:
        """Undo `sleep`."""

    def precapture(self, *, sampling: Sequence[SamplingParams] = ()) -> int:
        """Capture what would otherwise be built during the first steps (decode graphs) for
        requests sampled as `sampling` says (empty: the engine's own guess), so no training
        step pays for it; returns how many are held. Nothing to do here."""
        return 0

    async def close(self) -> None:
        """Stop background work; pending requests finish with `abort`."""
