"""What an env's step hands back is checked by the rollout: a reward that is not a finite number
or a malformed step result ends that episode as env_error (never a NaN trained on, never a
crash of the run), a slow `score()` does not stall other episodes, and the trainer's console
line names the step's env errors."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest
from simple_engine import ScriptedEngine

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.envs.core import AgentEnv, Observation, Task, ToolEnv
from agentrl.rollout import RolloutRunner
from agentrl.rollout.runner import env_error_line
from agentrl.types import Message, Trajectory, TrajectoryGroup


class AnswerEnv(ToolEnv):
    """Task i; `score` returns `reward` for task 0, 1.0 for the others (after `wait` on 0)."""

    def __init__(self, reward: Any = 1.0, wait: threading.Event | None = None) -> None:
        super().__init__(max_turns=2)
        self.reward, self.wait = reward, wait

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        return Task([Message("user", "Answer.")], answer=options.get("q", 0))

    def score(self, final: Message) -> float:
        assert self.task is not None
        if self.task.answer != 0:
            return 1.0
        if self.wait is not None:
            self.wait.wait(10)  # a slow judge; released by the test
        return self.reward


class RawStepEnv(AgentEnv):
    """step() returns `out` verbatim."""

    max_turns = 2

    def __init__(self, out: Any) -> None:
        self.out = out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return Observation([Message("user", "Say hi")]), {}

    def step(self, action: Message) -> Any:
        return self.out


def run(chat: ChatFormat, factory: Any, tasks: list[Any], **cfg: Any) -> list[Trajectory]:
    rollout = RolloutConfig(**{"max_turns": 2, "concurrency": 8, **cfg})
    engine = ScriptedEngine(chat, ["hi"])

    def named() -> Any:
        env = factory()
        env.spec_id = "test/bad-v0"
        return env

    runner = RolloutRunner(engine, chat, named, rollout, SamplingConfig(max_new_tokens=16))
    trajs = [t for g in runner.collect_sync(tasks, n=1) for t in g.trajectories]
    runner.close()
    for t in trajs:
        t.validate()
    return trajs


@pytest.mark.parametrize(
    "bad,shown", [(float("nan"), "nan"), (float("inf"), "inf"), (None, "None"), ("1.0", "'1.0'")]
)
def test_non_finite_reward_is_an_env_error(chat: ChatFormat, bad: Any, shown: str) -> None:
    trajs = run(chat, lambda: AnswerEnv(bad), [{"q": 0}, {"q": 1}])
    broken, fine = trajs
    assert broken.termination == "env_error" and broken.reward == 0.0
    error = broken.metadata["error"]
    assert "test/bad-v0" in error and "AnswerEnv" in error and shown in error, error
    assert "finite real number" in error
    assert (fine.termination, fine.reward) == ("done", 1.0)  # the run goes on
    assert all(math.isfinite(t.reward) for t in trajs)


def test_numpy_and_int_rewards_still_count(chat: ChatFormat) -> None:
    for good in (np.float32(0.5), 1, np.int64(1)):
        (traj,) = run(chat, lambda g=good: AnswerEnv(g), [{"q": 0}])
        assert traj.termination == "done" and traj.reward == float(good)


@pytest.mark.parametrize(
    "out,problem",
    [
        ((Observation([]), None, True, False, {}), "reward NoneType None"),
        (([Message("user", "x")], 1.0, True, False, {}), "observation list"),
        ((Observation([]), 1.0, True), "expected a 5-tuple"),
        (None, "expected a 5-tuple"),
        ((Observation(["not a message"]), 1.0, True, False, {}), "list of Message"),  # type: ignore[list-item]
    ],
)
def test_malformed_step_is_a_named_env_error(chat: ChatFormat, out: Any, problem: str) -> None:
    trajs = run(chat, lambda: RawStepEnv(out), [0, 1])
    for traj in trajs:
        assert traj.termination == "env_error"
        error = traj.metadata["error"]
        assert error.startswith("step: env test/bad-v0 (RawStepEnv) returned"), error
        assert problem in error, error


def test_slow_score_runs_off_the_loop_and_times_out(chat: ChatFormat) -> None:
    """score() of task 0 blocks (a slow judge): its episode ends as a timeout, the others
    finish normally meanwhile (on the event loop, they would wait for it)."""
    release = threading.Event()
    try:
        trajs = run(
            chat,
            lambda: AnswerEnv(0.0, release),
            [{"q": i} for i in range(4)],
            episode_timeout_s=1.0,
        )
    finally:
        release.set()
    assert [t.termination for t in trajs] == ["timeout", "done", "done", "done"]
    assert [t.reward for t in trajs[1:]] == [1.0, 1.0, 1.0]


def test_env_error_line_counts_and_names_the_first_error() -> None:
    def traj(termination: str, error: str | None = None) -> Trajectory:
        t = Trajectory(prompt_ids=[1], termination=termination)  # type: ignore[arg-type]
        t.metadata["error"] = error
        return t

    ok = TrajectoryGroup("g0", [traj("done"), traj("done")])
    assert env_error_line([ok]) is None
    bad = TrajectoryGroup(
        "g1", [traj("env_error", "step: KeyError('a')\nmore"), traj("env_error", "second")]
    )
    line = env_error_line([ok, bad])
    assert line is not None
    assert "2/4 episodes ended in infrastructure failures (env_error 2;" in line
    assert "left out of training" in line and "step: KeyError('a')" in line
    assert "second" not in line and "more" not in line
