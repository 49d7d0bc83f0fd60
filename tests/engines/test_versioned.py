"""`VersionedRequests` (agentrl/engines/_versioned.py), the per-token weight versions both
vLLM modes share, against `ScriptedPausableEngine`: a FAKE engine with vLLM's pause
semantics (abort mode stops running requests and returns their tokens; a request that
arrives while paused waits for resume; abort of an id it has not seen yet does nothing). It
records which weights really sampled each token, so the stamps can be checked exactly,
including for a request that reaches the engine only after the pause: the race the drain
closes, which real vLLM hits too rarely to test on purpose (the real-vLLM tests in
tests/engines/real_vllm/ check the stamps against a re-score)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrl.engines import EngineError, GenerateResult
from agentrl.engines._versioned import VersionedRequests


class ScriptedPausableEngine:
    """FAKE: one token per `tick` seconds per request; each token records the weights that
    sampled it (`true_versions`). A request spends `transit` seconds before the engine sees
    it (an HTTP hop or vLLM's input processing)."""

    def __init__(self, tick: float = 0.005, keep: bool = False) -> None:
        self.keep = keep  # pause mode "keep": requests wait in place and stamp their tokens
        self.weights = 0
        self.paused = False
        self.tick = tick
        self.running: dict[str, asyncio.Event] = {}  # request id -> its abort event
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.true_versions: dict[str, list[int]] = {}
        self.calls: list[str] = []

    async def run(self, sid: str, left: int, transit: float) -> GenerateResult:
        await asyncio.sleep(transit)
        aborted = self.running[sid] = asyncio.Event()
        out: list[int] = []
        try:
            while len(out) < left:
                if self.paused:
                    waiter = asyncio.ensure_future(self.resumed.wait())
                    stop = asyncio.ensure_future(aborted.wait())
                    await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    stop.cancel()
                if aborted.is_set():
                    return GenerateResult(out, [0.0] * len(out), "abort")
                out.append(self.weights)
                await asyncio.sleep(self.tick)
            own = list(out) if self.keep else []
            return GenerateResult(out, [0.0] * len(out), "length", weight_versions=own)
        finally:
            self.true_versions.setdefault(sid.rsplit("-", 1)[0], []).extend(out)
            del self.running[sid]

    async def pause(self) -> None:
        self.calls.append("pause")
        self.paused = True
        self.resumed.clear()
        if not self.keep:
            for event in self.running.values():
                event.set()

    async def abort(self, ids: list[str]) -> None:
        self.calls.append("abort")
        for sid in ids:
            if sid in self.running:
                self.running[sid].set()

    async def load(self) -> None:
        self.calls.append("load")
        self.weights += 1

    async def resume(self) -> None:
        self.calls.append("resume")
        self.paused = False
        self.resumed.set()


def update(vr: VersionedRequests, eng: ScriptedPausableEngine, **kw: Any) -> Any:
    args = dict(pause=eng.pause, abort=eng.abort, load=eng.load, resume=eng.resume)
    return vr.update(**{**args, "drain_timeout_s": 5.0, **kw})


def request(vr: VersionedRequests, eng: ScriptedPausableEngine, rid: str, transit: float) -> Any:
    async def segment(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
        return await eng.run(sid, left, transit)

    return vr.generate(segment, 40, rid)


def test_stamps_equal_the_weights_that_sampled_each_token_even_for_late_arrivals() -> None:
    async def main() -> tuple[dict[str, GenerateResult], ScriptedPausableEngine]:
        eng, vr = ScriptedPausableEngine(), VersionedRequests(drain_poll_s=0.01)
        early = {f"r{i}": asyncio.ensure_future(request(vr, eng, f"r{i}", 0.0)) for i in range(3)}
        await asyncio.sleep(0.05)
        # Sent just before the update; they reach the engine after its pause.
        late = {f"l{i}": asyncio.ensure_future(request(vr, eng, f"l{i}", 0.03)) for i in range(2)}
        await asyncio.sleep(0)
        await update(vr, eng)
        out = {k: await t for k, t in {**early, **late}.items()}
        return out, eng

    out, eng = asyncio.run(main())
    for rid, res in out.items():
        assert res.finish_reason == "length" and len(res.token_ids) == 40
        assert res.weight_versions == eng.true_versions[rid], rid
    assert {tuple(sorted(set(r.weight_versions))) for r in out.values()} == {(0, 1), (1,)}
    assert eng.calls.count("abort") >= 2  # the late ones were aborted when they arrived


def test_keep_mode_requests_stay_whole_and_carry_the_engines_own_stamps() -> None:
    """Pause mode "keep" (vLLM's RL API): nothing is aborted or drained, each request is
    one segment, and the stamps are the engine's own per-token labels."""

    async def main() -> tuple[dict[str, GenerateResult], ScriptedPausableEngine]:
        eng, vr = ScriptedPausableEngine(keep=True), VersionedRequests(drain_poll_s=0.01)
        early = {f"r{i}": asyncio.ensure_future(request(vr, eng, f"r{i}", 0.0)) for i in range(3)}
        await asyncio.sleep(0.05)
        late = {f"l{i}": asyncio.ensure_future(request(vr, eng, f"l{i}", 0.03)) for i in range(2)}
        await asyncio.sleep(0)
        await update(vr, eng, drain=False)
        out = {k: await t for k, t in {**early, **late}.items()}
        return out, eng

    out, eng = asyncio.run(main())
    for rid, res in out.items():
        assert res.finish_reason == "length" and len(res.token_ids) == 40
        assert res.weight_versions == eng.true_versions[rid], rid
    assert (0, 1) in {tuple(sorted(set(r.weight_versions))) for r in out.values()}
    assert eng.calls == ["pause", "load", "resume"]


def test_a_segment_that_never_returns_fails_the_update_and_the_engine_resumes() -> None:
    async def main() -> tuple[VersionedRequests, ScriptedPausableEngine, str]:
        eng, vr = ScriptedPausableEngine(), VersionedRequests(drain_poll_s=0.01)

        async def stuck(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
            await asyncio.sleep(3600)  # ignores aborts (a hung transport)
            raise AssertionError

        task = asyncio.ensure_future(vr.generate(stuck, 4, "s"))
        await asyncio.sleep(0.01)
        with pytest.raises(EngineError, match="1 request\\(s\\) still running 0.1s") as err:
            await update(vr, eng, drain_timeout_s=0.1)
        task.cancel()
        return vr, eng, str(err.value)

    vr, eng, _ = asyncio.run(main())
    assert eng.calls[0] == "pause" and eng.calls[-1] == "resume" and "load" not in eng.calls
    assert vr.version == 0 and not vr.updating


def test_a_failed_load_leaves_the_weights_unknown_until_an_update_succeeds() -> None:
    """The backend may have applied part or all of a load that failed, so no version can be
    stamped: requests fail, naming why, until the next update succeeds."""

    async def main() -> tuple[VersionedRequests, ScriptedPausableEngine, list[GenerateResult]]:
        eng, vr = ScriptedPausableEngine(), VersionedRequests(drain_poll_s=0.01)

        async def broken() -> None:
            raise RuntimeError("bad weights")

        with pytest.raises(RuntimeError, match="bad weights"):
            await update(vr, eng, load=broken)
        refused = await request(vr, eng, "refused", 0.0)
        await update(vr, eng)
        return vr, eng, [refused, await request(vr, eng, "after", 0.0)]

    vr, eng, (refused, after) = asyncio.run(main())
    assert refused.finish_reason == "error" and "weights are unknown" in (refused.error or "")
    assert eng.calls == ["pause", "resume", "pause", "load", "resume"]  # resumed after both
    assert vr.version == 1 and after.weight_versions == [1] * 40 and not vr.updating


def test_a_cancelled_update_still_resumes_the_engine() -> None:
    """The admin timeout cancels the update mid-load: the engine must not stay paused."""

    async def main() -> tuple[VersionedRequests, ScriptedPausableEngine]:
        eng, vr = ScriptedPausableEngine(), VersionedRequests(drain_poll_s=0.01)

        async def slow() -> None:
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(update(vr, eng, load=slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return vr, eng

    vr, eng = asyncio.run(main())
    assert eng.calls == ["pause", "resume"] and not eng.paused and not vr.updating
    assert vr.unknown_weights and vr.version == 0


def test_an_abort_with_an_error_or_without_an_update_ends_the_request() -> None:
    async def main() -> list[GenerateResult]:
        vr = VersionedRequests()

        async def timed_out(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
            return GenerateResult([7], [0.0], "abort", "timed out")

        async def aborted(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
            return GenerateResult([7, 8], [0.0, 0.0], "abort")

        return [await vr.generate(timed_out, 4, "a"), await vr.generate(aborted, 4, "b")]

    timed_out, aborted = asyncio.run(main())
    assert (timed_out.finish_reason, timed_out.error) == ("abort", "timed out")
    assert aborted.finish_reason == "abort" and aborted.weight_versions == [0, 0]


def test_continuations_sample_with_their_own_seed() -> None:
    from agentrl.engines._versioned import segment_seed

    assert segment_seed(None, 3) is None and segment_seed(7, 0) == 7
    seeds = {segment_seed(7, part) for part in range(1, 50)} | {7}
    assert len(seeds) == 50 and all(0 <= s < 2**31 for s in seeds)
    assert segment_seed(7, 1) == segment_seed(7, 1) != segment_seed(8, 1)
