"""`engine.sleep_between_phases`: the trainer sleeps the engine after each rollout (the update
runs without the engine's KV cache and weights on the GPU, verl's `free_cache_engine`) and
the rollout role wakes it before the next weight sync or rollout.

Real components (tiny qwen2, a real env, the real HFEngine on CPU, where sleep frees nothing
but runs the same path); the only stand-ins are pass-through spies that record the calls, and
one named fake engine that cannot sleep.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from agentrl.config import EngineConfig, TrainConfig, load_config
from agentrl.engines import BUILDERS, Engine, EngineError, build_engine

sys.path.insert(0, str(Path(__file__).parents[1] / "trainer"))

from trainer_synth import train_overrides  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _trainer(cache: Path, out: Path, sleep: bool) -> Any:
    from agentrl.assembly import build_trainer

    overrides = train_overrides(cache, out, engine__sleep_between_phases=str(sleep).lower())
    return build_trainer(load_config(TrainConfig, None, overrides))


def _record(engine: Any, calls: list[str], mp: pytest.MonkeyPatch) -> None:
    for name in ("sleep", "wake", "update_weights"):
        real = getattr(engine, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        mp.setattr(engine, name, spy)


def test_train_step_sleeps_after_rollout_and_wakes_before_sync(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = _trainer(tiny_model_dir.parent, tmp_path, sleep=True)
    try:
        rollout, calls = trainer.c.rollout, []
        _record(rollout.engine, calls, monkeypatch)
        items = trainer.c.data.eval_items(2)
        before = rollout.collect_greedy(items)
        rollout.offload()
        assert calls == ["sleep"] and rollout.engine._asleep
        after = rollout.collect_greedy(items)  # woken first, then serves as before
        assert calls == ["sleep", "wake"]
        assert [g.trajectories[0].response_ids for g in after] == [
            g.trajectories[0].response_ids for g in before
        ]
        calls.clear()
        metrics = trainer.train_step()
        assert calls == ["sleep", "wake", "update_weights"]  # the update ran with it asleep
        assert metrics["time/weight_sync"] >= 0
    finally:
        trainer.finish()


def test_off_by_default_never_sleeps(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EngineConfig().sleep_between_phases is False
    trainer = _trainer(tiny_model_dir.parent, tmp_path, sleep=False)
    try:
        calls: list[str] = []
        _record(trainer.c.rollout.engine, calls, monkeypatch)
        trainer.train_step()
        assert calls == ["update_weights"]
    finally:
        trainer.finish()


class SleeplessFakeEngine(Engine):
    """A fake engine that declares no sleep support (like vLLM started without sleep mode)."""

    closed = False

    async def generate(self, prompt_ids: Any, params: Any, **kw: Any) -> Any:
        raise NotImplementedError

    def update_weights(self, named_tensors: Any) -> None:
        pass

    async def close(self) -> None:
        SleeplessFakeEngine.closed = True


def test_an_engine_that_cannot_sleep_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BUILDERS, "sglang", lambda cfg, model, tok: SleeplessFakeEngine())
    cfg = EngineConfig(kind="sglang", sleep_between_phases=True)
    with pytest.raises(EngineError, match="engine.sleep_between_phases: SleeplessFakeEngine"):
        build_engine(cfg, "/some/model", None)
    assert SleeplessFakeEngine.closed


def test_hf_engine_sleeps_past_abandoned_rows_and_serves_the_same_after_wake(tiny: Any) -> None:
    """The rollout runner's loop stops between collects, so a request whose caller timed out
    can still sit in the batch when the trainer sleeps the engine: sleep drops it. Asleep,
    requests fail with an error; woken, the engine answers exactly as before."""
    import asyncio

    from agentrl.engines import HFEngine, SamplingParams

    model, tok = tiny
    engine = HFEngine(model, tok)
    loop = asyncio.new_event_loop()
    ids = tok.encode("What is 3 + 4?")
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    try:
        before = loop.run_until_complete(engine.generate(ids, greedy))
        eos, engine.eos_ids = engine.eos_ids, frozenset()  # the next one never stops itself
        endless = SamplingParams(max_new_tokens=100_000, temperature=0.0)
        engine.request_timeout_s = 0.05  # this request only: its caller gives up
        late = loop.run_until_complete(engine.generate(ids, endless))
        assert late.finish_reason == "abort"
        engine.eos_ids, engine.request_timeout_s = eos, None
        engine.sleep()
        asleep = loop.run_until_complete(engine.generate(ids, greedy))
        assert asleep.finish_reason == "error" and "asleep" in (asleep.error or "")
        engine.wake()
        after = loop.run_until_complete(engine.generate(ids, greedy))
        assert after.token_ids == before.token_ids and after.logprobs == before.logprobs
    finally:
        loop.run_until_complete(engine.close())
        loop.close()
