"""Exact per-token weight versions for engines whose weight update aborts running requests:
vLLM in-process (`AsyncLLM.pause_generation(mode="abort")`) and a vLLM server
(`POST /pause?mode=abort`). Both vLLM modes share this one implementation.

Why segments: a pause in abort mode stops every running request between two engine steps and
returns what it sampled so far (`finish_reason` "abort"). Once the new weights are in, the
request goes on as a new *segment* whose prompt is the original prompt plus the tokens sampled
so far. Each segment's tokens are stamped with the weights' version at the segment's start,
so `GenerateResult.weight_versions` says which weights sampled each token. A pipelined
trainer (docs/async.md) needs exactly that. The continuation re-reads its prefix under the
new weights (the old KV cache went with the old weights). A seeded request's continuation
samples with a seed derived from the request's and the segment's index (`segment_seed`):
the same seed would replay the random draws of the request's first tokens. A stop string
that straddles the interruption is not seen.

Pause mode "keep" (vLLM >= 0.32, in-process `agentrl.engines.vllm` and a server,
`agentrl.engines.vllm_http`): the engine pauses its requests in place, the weights load, the running requests' KV is recomputed under the new
weights, and they resume: one segment per request, and vLLM itself labels each token with
the weights that sampled it (`update_weight_version`, the output's `weight_versions`
spans), so `update(drain=False)` and the segment's own stamps replace the abort and drain.

Why a drain: a segment sent just before the pause can reach the engine just after it. The
paused engine would queue it and run it under the *new* weights with the *old* stamp. So,
once paused, `update` aborts the in-flight segments again and again (late ones keep
arriving) until every segment started before the update has come back. Only then do the
weights load. Segments that start later wait at the gate until the update is done.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable

from agentrl.engines.base import EngineError, FinishReason, GenerateResult

# One segment: (tokens sampled so far, tokens left, segment request id, segment index)
# -> its result.
Segment = Callable[[list[int], int, str, int], Awaitable[GenerateResult]]


def segment_seed(seed: int | None, part: int) -> int | None:
    """The sampling seed of segment `part` of a request seeded `seed`: the request's own for
    the first segment (an uninterrupted request samples as without segments), a distinct
    one derived from both for each continuation, so seeded runs stay reproducible."""
    if seed is None or part == 0:
        return seed
    return (seed * 1_000_003 + part * 0x9E3779B1) % 2**31


class VersionedRequests:
    """The weight version, the gate that holds new segments during an update, and the
    segments in flight. Use it on the engine's own event loop only."""

    def __init__(self, drain_poll_s: float = 0.2) -> None:
        self.version = 0  # updates applied
        self._epoch = 0  # updates started: a segment that saw another epoch was interrupted
        self._inflight: set[str] = set()
        self._open: asyncio.Event | None = None
        self._empty: asyncio.Event | None = None
        self.drain_poll_s = drain_poll_s
        self.unknown_weights: str | None = None  # set while a load may or may not have landed
        self.segments_sent = 0  # one per request, plus one per continuation after an abort

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        """The events are made lazily, on the engine loop that first uses them."""
        if self._open is None or self._empty is None:
            self._open, self._empty = asyncio.Event(), asyncio.Event()
            self._open.set()
            self._empty.set()
        return self._open, self._empty

    @property
    def updating(self) -> bool:
        return not self._events()[0].is_set()

    @property
    def inflight(self) -> frozenset[str]:
        return frozenset(self._inflight)

    async def generate(self, segment: Segment, budget: int, request_id: str) -> GenerateResult:
        """Run one request of `budget` new tokens as segments (see the module docstring).
        A segment that ends in "abort" without an error while an update started is continued.
        Any other end (stop, length, error, timeout) is the request's end."""
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        gate, empty = self._events()
        for part in itertools.count():
            await gate.wait()
            if self.unknown_weights:
                error = (
                    f"{self.unknown_weights}: the engine's weights are unknown, so no token "
                    "could be stamped with its version; call update_weights again"
                )
                return GenerateResult(ids, logprobs, "error", error, weight_versions=versions)
            version, epoch, sid = self.version, self._epoch, f"{request_id}-{part}"
            self._inflight.add(sid)  # no await between the gate check and this
            self.segments_sent += 1
            empty.clear()
            try:
                res = await segment(ids, budget - len(ids), sid, part)
            finally:
                self._inflight.discard(sid)
                if not self._inflight:
                    empty.set()
            interrupted = res.finish_reason == "abort" and res.error is None
            interrupted = interrupted and epoch != self._epoch
            ids += res.token_ids
            logprobs += res.logprobs
            # An engine that labels its weights (vLLM's pause mode "keep") stamps its own
            # tokens; otherwise every token of a segment has the segment's version.
            own = res.weight_versions
            versions += own if own else [version] * len(res.token_ids)
            if interrupted and len(ids) < budget:
                continue
            reason: FinishReason = "length" if interrupted else res.finish_reason
            return GenerateResult(ids, logprobs, reason, res.error, weight_versions=versions)
        raise AssertionError("unreachable")

    async def update(
        self,
        *,
        pause: Callable[[], Awaitable[None]],
        abort: Callable[[list[str]], Awaitable[None]],
        load: Callable[[], Awaitable[None]],
        resume: Callable[[], Awaitable[None]],
        drain_timeout_s: float,
        drain: bool = True,
    ) -> None:
        """Close the gate, `pause` the engine, `abort` the in-flight segments until all have
        come back, `load` the weights, count the version, `resume`, open the gate.
        `drain=False` (an engine that pauses in place and stamps its own tokens, see
        the module docstring): the running segments stay in the engine, nothing is aborted.

        Whatever happens after the pause was sent (an error, a timeout, a cancelled call),
        `resume` runs, shielded from the cancellation, and the gate opens: a paused engine
        would queue every later request forever. A `load` that did not finish leaves the
        weights unknown (the backend may still apply them): `unknown_weights` says why, and
        `generate` fails every request until an update succeeds. Each engine call is
        bounded by `drain_timeout_s`."""
        gate, empty = self._events()
        gate.clear()
        self._epoch += 1
        bounded = functools.partial(asyncio.wait_for, timeout=drain_timeout_s)
        try:
            try:
                await bounded(pause())
                if drain:
                    await self._drain(abort, empty, drain_timeout_s)
                self.unknown_weights = "a weight update did not finish"
                await bounded(load())
                self.unknown_weights = None
                self.version += 1
            except BaseException as exc:
                try:
                    await asyncio.shield(bounded(resume()))
                except Exception as again:  # keep the first error; say resume failed too
                    exc.add_note(f"and resuming the engine failed: {again!r}")
                raise
            await bounded(resume())
        finally:
            gate.set()

    async def _drain(
        self,
        abort: Callable[[list[str]], Awaitable[None]],
        empty: asyncio.Event,
        timeout_s: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._inflight:
            left = deadline - loop.time()
            if left <= 0:
                raise EngineError(
                    f"weight update: {len(self._inflight)} request(s) still running "
                    f"{timeout_s}s after the engine was paused and they were aborted"
                )
            await asyncio.wait_for(abort(sorted(self._inflight)), left)
            try:
                await asyncio.wait_for(empty.wait(), self.drain_poll_s)
            except asyncio.TimeoutError:
                pass
