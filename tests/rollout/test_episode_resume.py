"""Episodes continued from what a checkpoint kept (agentrl/rollout/resume.py), on the real
engine and the fine-tuned tiny calc agent.

- `ResumableEnv`: a calc env restored from a snapshot into a fresh instance steps exactly as
  the original would (task, turn count, RNG); the word-problem env declares it too.
- An episode stopped at a turn boundary and continued on a fresh env (the
  HF engine, greedy) produces the very trajectory of the uninterrupted run: the prefix is not sampled
  again (its tokens keep their recorded weight versions while the continuation carries the
  engine's newer one), the env is restored, never reset.
- `check_env` proves a declared snapshot (pickled mid-episode, restored, the next step
  answered the same) and names a restore that brings back another state.
- An env without the capability: its boundary says why, and the episode runs again from its
  seed (reset once), to the same trajectory. A finished episode is kept as is (no env built).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch

import agentrl.envs as envs
from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.envs import ResumableEnv, Task, ToolEnv
from agentrl.envs.checker import check_resume
from agentrl.rollout.resume import Boundary, EpisodeBook, EpisodeSnapshot, EpisodeState
from agentrl.rollout.runner import run_groups, sampling_params
from agentrl.tools import ToolSet
from agentrl.tools.calculator import calculator
from agentrl.types import Message, Trajectory

CFG = RolloutConfig(max_turns=4, max_total_tokens=400, concurrency=1)


def test_calc_env_restores_into_a_fresh_instance() -> None:
    env = envs.make("math/calc-v0")
    env.reset(seed=7)
    env.step(env.oracle_action())
    saved = env.snapshot()
    fresh = envs.make("math/calc-v0")
    fresh.restore(saved)
    assert fresh.task == env.task and fresh.turn == env.turn == 1
    assert fresh.np_random.integers(1 << 30) == env.np_random.integers(1 << 30)
    final = env.oracle_action()
    assert fresh.oracle_action() == final
    assert fresh.step(final)[1:4] == env.step(final)[1:4] == (1.0, True, False)
    assert isinstance(envs.make("math/word-v0"), ResumableEnv)


class PlainCalc(ToolEnv):
    """The calc task on a `ToolEnv` that does not declare `ResumableEnv`."""

    max_turns = 4
    resets = 0

    def __init__(self) -> None:
        super().__init__(ToolSet.of(calculator))
        self.inner = envs.make("math/calc-v0")

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        PlainCalc.resets += 1
        return self.inner.new_task(rng, options)

    def score(self, final: Message) -> float:
        self.inner.task = self.task
        return float(self.inner.score(final))


class RecordingBook(EpisodeBook):
    """The runner's book, also keeping a copy of every boundary as it is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[EpisodeSnapshot] = []

    def marker(self, key: str, k: int) -> Any:
        mark = super().marker(key, k)

        def both(b: Boundary) -> None:
            mark(b)
            self.seen.append(b.copy())

        return both


class Counting:
    """An env factory that counts what it built and how often each env was reset."""

    def __init__(self, make: Any) -> None:
        self.make, self.built = make, 0

    def __call__(self) -> Any:
        self.built += 1
        return self.make()


@pytest.fixture(scope="module")
def engine(agent_model: Any, chat: ChatFormat) -> Any:
    hf = pytest.importorskip("agentrl.engines.hf")
    return hf.HFEngine(agent_model, chat.tokenizer, max_batch_size=4)


def _run(
    engine: Any,
    chat: ChatFormat,
    factory: Any,
    resume: list[EpisodeState] | None = None,
    book: EpisodeBook | None = None,
) -> Trajectory:
    sampling = sampling_params(SamplingConfig(temperature=0.0, max_new_tokens=48), chat, 123)

    async def go() -> Any:
        return await run_groups(
            factory,
            engine,
            chat,
            [11],
            1,
            sampling=sampling,
            cfg=CFG,
            group_prefix="p0-",
            book=book if book is not None else EpisodeBook(),
            resume=resume or (),
        )

    (group,) = asyncio.run(go())
    return group.trajectories[0]


def _multi_turn(engine: Any, chat: ChatFormat, make: Any) -> tuple[Trajectory, EpisodeSnapshot]:
    book = RecordingBook()
    whole = _run(engine, chat, make, book=book)
    assert len(whole.turns) >= 2 and book.seen, "the calc agent calls the calculator first"
    return whole, book.seen[0]


def _same(a: Trajectory, b: Trajectory) -> None:
    assert a.prompt_ids == b.prompt_ids and a.response_ids == b.response_ids
    assert a.loss_mask == b.loss_mask and a.messages == b.messages
    assert (a.reward, a.termination, len(a.turns)) == (b.reward, b.termination, len(b.turns))
    assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def _sampled_versions(t: Trajectory, end: int | None = None) -> list[int]:
    pairs = zip(t.weight_versions[:end], t.loss_mask[:end], strict=True)
    return [v for v, m in pairs if m]


def test_a_continued_episode_is_the_uninterrupted_one(engine: Any, chat: ChatFormat) -> None:
    whole, snap = _multi_turn(engine, chat, lambda: envs.make("math/calc-v0"))
    assert snap.resumable and snap.turns == 1 and not snap.why
    cut = len(snap.traj.response_ids)
    assert snap.traj.response_ids == whole.response_ids[:cut]
    before = engine.weight_version
    engine.update_weights(engine.model.named_parameters())  # same weights, a newer version
    factory = Counting(lambda: envs.make("math/calc-v0"))
    resumed = _run(engine, chat, factory, resume=[snap])
    _same(resumed, whole)
    assert factory.built == 1 and resumed.metadata["resumed"] == {"turn": 1, "token": cut}
    sampled = _sampled_versions(resumed)
    kept = _sampled_versions(resumed, cut)
    assert kept == _sampled_versions(snap.traj)
    assert set(kept) == {before} and set(sampled[len(kept) :]) == {before + 1}


def test_an_env_without_the_capability_runs_again_from_its_seed(
    engine: Any, chat: ChatFormat
) -> None:
    whole, snap = _multi_turn(engine, chat, PlainCalc)
    assert not snap.resumable and snap.why == "PlainCalc does not declare ResumableEnv"
    PlainCalc.resets = 0
    again = _run(engine, chat, PlainCalc, resume=[snap])
    _same(again, whole)
    assert PlainCalc.resets == 1 and "resumed" not in again.metadata


def test_a_finished_episode_is_kept_as_is(engine: Any, chat: ChatFormat) -> None:
    whole = _run(engine, chat, lambda: envs.make("math/calc-v0"))
    factory = Counting(lambda: envs.make("math/calc-v0"))
    kept = _run(engine, chat, factory, resume=[whole])
    assert kept is whole and factory.built == 0


def test_check_env_proves_the_snapshot_and_names_a_broken_restore() -> None:
    for env_id in ("math/calc-v0", "math/calc-easy-v0", "math/word-v0"):
        assert check_resume(envs.make(env_id), 0)
    assert not check_resume(PlainCalc(), 0)  # not declared: nothing to check

    class ForgetfulCalc(type(envs.make("math/calc-v0"))):  # type: ignore[misc]
        def restore(self, state: Any) -> None:
            super().restore(state)
            self.task.answer = "-1"  # restores another task than the one snapshotted

    broken = ForgetfulCalc()
    with pytest.raises(envs.EnvCheckError, match=r"restore\(snapshot\(\)\) then the same"):
        envs.check_env(broken)
