"""The episode clock counts an episode's own time, not its wait for an engine slot.

Real hf engine on the tiny qwen2 model with `max_batch_size=1`, so concurrent episodes' requests
queue one behind another: with a timeout shorter than the queue but longer than one episode's
own work, none times out and each records its wait as `spans["queued"]`. An episode whose own
work exceeds the timeout still times out, and the wall-clock bound
(`rollout.episode_wall_factor`) still ends an episode that only ever waits. Timeouts are set
from a solo episode measured in the same test; only inequalities with wide margins are
asserted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentrl import envs
from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.hf import HFEngine
from agentrl.rollout import RolloutRunner
from agentrl.rollout.clock import EpisodeClock, EpisodeTimeout
from agentrl.types import Trajectory

TOKENS = 48  # one generation per episode: its own work


@pytest.fixture(scope="module")
def engine(tiny_path: Path, chat: ChatFormat) -> HFEngine:
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).eval()
    return HFEngine(model, chat.tokenizer, max_batch_size=1)


def _collect(engine: HFEngine, chat: ChatFormat, n: int, **cfg: Any) -> list[Trajectory]:
    rollout = RolloutConfig(
        **{"n": 1, "max_turns": 1, "max_total_tokens": 4096, "concurrency": n, **cfg}
    )
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=TOKENS)
    runner = RolloutRunner(engine, chat, lambda: envs.make("math/calc-v0"), rollout, sampling)
    try:
        groups = runner.collect_sync(list(range(n)), 1)
    finally:
        runner.close()
    trajs = [t for g in groups for t in g.trajectories]
    for t in trajs:
        t.validate()
    return trajs


def _solo_s(engine: HFEngine, chat: ChatFormat) -> float:
    """One episode alone (after a warm-up): its own work, no queue."""
    _collect(engine, chat, 1, episode_timeout_s=600.0)
    (traj,) = _collect(engine, chat, 1, episode_timeout_s=600.0)
    assert traj.termination != "timeout"
    return float(traj.metadata["wall_s"])


def test_time_queued_for_an_engine_slot_is_not_the_episodes(
    engine: HFEngine, chat: ChatFormat
) -> None:
    solo = _solo_s(engine, chat)
    n, timeout = 10, 4 * solo  # the last episode waits for ~9 others: about 9 solo episodes
    trajs = _collect(engine, chat, n, episode_timeout_s=timeout, episode_wall_factor=100.0)
    assert [t.termination for t in trajs if t.termination == "timeout"] == []
    queued = sorted(t.metadata["spans"]["queued"] for t in trajs)
    assert all(q > 0 for q in queued[1:])  # all but the first admitted waited for the slot
    assert queued[-1] > timeout  # the old clock, queue included, would have timed it out
    for t in trajs:
        spans = t.metadata["spans"]
        assert spans["queued"] + spans["generate"] <= t.metadata["wall_s"] + 1e-3


def test_own_work_past_the_timeout_still_times_out(engine: HFEngine, chat: ChatFormat) -> None:
    solo = _solo_s(engine, chat)
    (traj,) = _collect(engine, chat, 1, episode_timeout_s=solo / 10, episode_wall_factor=100.0)
    assert traj.termination == "timeout"
    assert "its own time" in traj.metadata["error"]


def test_the_wall_bound_ends_episodes_that_only_wait(engine: HFEngine, chat: ChatFormat) -> None:
    """`episode_wall_factor` 1: the queue counts again, so the last of 10 episodes in line,
    waiting ~9 solo episodes with a timeout of 4, ends as timeout naming the wall bound."""
    solo = _solo_s(engine, chat)
    trajs = _collect(engine, chat, 10, episode_timeout_s=4 * solo, episode_wall_factor=1.0)
    walled = [t for t in trajs if t.termination == "timeout"]
    assert walled and all("wall time" in t.metadata["error"] for t in walled)
    assert len(walled) < len(trajs)  # the first ones in line finish


def test_a_wait_that_never_ends_is_bounded() -> None:
    """A wedged engine (queued, never admitted): the wall bound ends the episode."""

    async def wedged(clock: EpisodeClock) -> None:
        clock.queue()
        await asyncio.sleep(3600)

    async def main() -> str:
        clock = EpisodeClock(0.05, wall_factor=2.0)
        with pytest.raises(EpisodeTimeout) as err:
            await asyncio.wait_for(clock.run(wedged(clock)), 60)
        assert clock.wall_s() >= clock.outer_s
        return str(err.value)

    assert "0.1s wall time" in asyncio.run(main())


def test_the_clock_stops_while_queued_and_runs_once_admitted() -> None:
    async def episode(clock: EpisodeClock) -> str:
        clock.queue()
        await asyncio.sleep(1.0)  # waiting for a slot: longer than the timeout
        clock.admit()
        await asyncio.sleep(0.01)  # own work
        return "done"

    async def main() -> tuple[str, float]:
        clock = EpisodeClock(0.5, wall_factor=10.0)
        return await clock.run(episode(clock)), clock.queued_s

    out, queued = asyncio.run(main())
    assert out == "done" and queued >= 1.0
