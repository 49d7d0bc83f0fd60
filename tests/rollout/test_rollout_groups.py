"""Grouping, per-episode env instances, bounded concurrency, dataset rows."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
from typing import Any

import pytest
from simple_engine import ScriptedEngine
from test_rollout_containment import TrapEnv, call

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.base import SamplingParams
from agentrl.rollout import RolloutRunner, run_groups, summarize


class CountingEnv(TrapEnv):
    live = 0
    peak = 0
    made: list[CountingEnv] = []

    def __init__(self) -> None:
        super().__init__()
        CountingEnv.made.append(self)
        self.resets: list[Any] = []

    async def areset(self, *, seed: Any = None, options: Any = None) -> Any:
        CountingEnv.live += 1
        CountingEnv.peak = max(CountingEnv.peak, CountingEnv.live)
        self.resets.append((seed, options))
        await asyncio.sleep(0.01)
        return await super().areset(seed=seed, options=options)

    def close(self) -> None:
        CountingEnv.live -= 1


def test_groups_envs_and_concurrency(chat: ChatFormat) -> None:
    CountingEnv.made.clear()
    cfg = RolloutConfig(concurrency=3, max_turns=3)
    engine = ScriptedEngine(chat, [call("boom"), "ok"], delay_s=0.01)
    groups = asyncio.run(
        run_groups(
            CountingEnv,
            engine,
            chat,
            [5, 6, 7],
            4,
            sampling=SamplingParams(max_new_tokens=64),
            cfg=cfg,
            group_prefix="s0-",
        )
    )
    assert [g.group_id for g in groups] == ["s0-seed5", "s0-seed6", "s0-seed7"]
    assert all(len(g.trajectories) == 4 for g in groups)
    assert {t.group_id for t in groups[1].trajectories} == {"s0-seed6"}
    assert sorted(t.metadata["sample"] for t in groups[0].trajectories) == [0, 1, 2, 3]
    assert len(CountingEnv.made) == 12 and len({id(e) for e in CountingEnv.made}) == 12
    assert all(len(e.resets) == 1 for e in CountingEnv.made)  # one env per episode
    assert CountingEnv.live == 0 and CountingEnv.peak <= 3
    assert groups[2].rewards == [1.0] * 4
    assert summarize(groups)["termination/done"] == 1.0


def test_dataset_rows_become_reset_options(chat: ChatFormat) -> None:
    CountingEnv.made.clear()
    runner = RolloutRunner(
        ScriptedEngine(chat, ["ok"]), chat, CountingEnv, RolloutConfig(), SamplingConfig()
    )
    groups = runner.collect_sync([{"q": "alpha"}, {"q": "beta", "seed": 9}], n=2)
    assert [g.group_id for g in groups] == ["c1-row0", "c1-row1"]
    first = groups[0].trajectories[0]
    assert first.messages[0].content == "Task alpha"
    assert sorted(s for e in CountingEnv.made for s, _ in e.resets) == [0, 0, 9, 9]
    assert runner.last_stats["episodes"] == 4
    json.loads(first.to_json())


def test_cancelled_episodes_still_close_their_envs(chat: ChatFormat) -> None:
    """A pipelined run cancels the groups still running when it closes: every env made must
    be closed anyway (sandboxes, browsers)."""

    class ClosingEnv(CountingEnv):
        closed: list[ClosingEnv] = []

        def close(self) -> None:
            ClosingEnv.closed.append(self)

    CountingEnv.made.clear()
    engine = ScriptedEngine(chat, [call("boom"), "ok"], delay_s=0.05)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(
            run_groups(
                ClosingEnv,
                engine,
                chat,
                [1, 2],
                3,
                sampling=SamplingParams(max_new_tokens=64),
                cfg=RolloutConfig(concurrency=6, max_turns=3),
            )
        )
        await asyncio.sleep(0.07)  # episodes are between their turns
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(cancel_midway())
    assert len(CountingEnv.made) == 6
    assert {id(e) for e in ClosingEnv.closed} == {id(e) for e in CountingEnv.made}


def _busy_runner(chat: ChatFormat) -> RolloutRunner:
    """A runner whose episodes call a tool every turn for 50 turns (a collect long enough to
    be stopped midway), the env counters reset."""
    CountingEnv.made.clear()
    CountingEnv.live = 0
    engine = ScriptedEngine(chat, [call("boom")] * 50, delay_s=0.05)
    cfg = RolloutConfig(concurrency=4, max_turns=50)
    return RolloutRunner(engine, chat, CountingEnv, cfg, SamplingConfig(max_new_tokens=64))


def test_ctrl_c_mid_collect_unwinds_every_episode(
    chat: ChatFormat, caplog: pytest.LogCaptureFixture
) -> None:
    """A real SIGINT while episodes run: the collect is cancelled at its next await, so every
    episode unwinds and closes its env before `run_sync` raises KeyboardInterrupt, and nothing
    is left for the garbage collector to report as "Task was destroyed but it is pending!"
    (the CLI's Ctrl-C is one line)."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    runner = _busy_runner(chat)
    live: list[int] = []

    async def interrupted() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: (live.append(CountingEnv.live), signal.raise_signal(2)))
        await runner.collect([1, 2], 2)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(KeyboardInterrupt):
            runner.run_sync(interrupted())
        assert live and live[0] > 0  # episodes were mid-flight
        assert CountingEnv.live == 0  # ... and each closed its env on the way out
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        runner.close(close_engine=True)
        gc.collect()
    assert "destroyed but it is pending" not in caplog.text


def test_with_ctrl_c_ignored_sigterm_still_cancels_the_collect(chat: ChatFormat) -> None:
    """A job a script started with `&` inherits SIGINT ignored. A real SIGINT must stay
    ignored (the collect goes on), but the CLI's SIGTERM handler, which calls the SIGINT
    handler with SIGTERM's number, must still cancel the collect and raise KeyboardInterrupt
    (it found SIG_IGN there and did nothing: a scheduler's stop was lost). SIG_IGN is back
    afterwards."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        runner = _busy_runner(chat)
        seen: list[int] = []

        def term() -> None:  # what agentrl.cli.train's SIGTERM handler does
            seen.append(CountingEnv.live)
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler)
            handler(signal.SIGTERM, None)

        async def stopped() -> None:
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, signal.raise_signal, signal.SIGINT)  # ignored
            loop.call_later(0.4, term)
            await runner.collect([1, 2], 2)

        with pytest.raises(KeyboardInterrupt):
            runner.run_sync(stopped())
        assert seen and seen[0] > 0  # still running after the ignored SIGINT
        assert CountingEnv.live == 0
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        runner.close(close_engine=True)
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_while_the_collect_task_is_created(
    chat: ChatFormat, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT landing inside `create_task` (its Python `call_soon`, after the first step is
    queued, before the task registers itself: CI hit it under SIGTERM). Python's handler
    raised there; `run_sync` saw no task, closed the coroutine, and the loop's next use
    stepped it: "Task exception was never retrieved ... cannot reuse already awaited
    coroutine". Now the run's own handler takes it: the task is cancelled, one
    KeyboardInterrupt, and the loop stays clean for `close`."""
    engine = ScriptedEngine(chat, [call("boom")] * 5)
    cfg = RolloutConfig(concurrency=2, max_turns=5)
    runner = RolloutRunner(engine, chat, CountingEnv, cfg, SamplingConfig(max_new_tokens=64))
    runner._loop = asyncio.new_event_loop()
    real = runner._loop.call_soon
    fired: list[bool] = []

    def call_soon(*args, **kwargs):  # the signal arrives mid-call, after queuing the step
        handle = real(*args, **kwargs)
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)
        return handle

    monkeypatch.setattr(runner._loop, "call_soon", call_soon)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(KeyboardInterrupt):
            runner.collect_sync([1, 2], 2)
        assert fired
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        runner.close(close_engine=True)
        gc.collect()
    assert "never retrieved" not in caplog.text and "pending" not in caplog.text, caplog.text
