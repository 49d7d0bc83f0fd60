"""Env step overhead without a model: how many env steps per second one core sustains.

Cases (each an episode loop of reset + steps, single process, no model):
* `agentenv-noop`: a bare `AgentEnv` whose step returns at once (the Python floor).
* `toolenv-answer`: a `ToolEnv` with no tools answered in one step (sync `step`).
* `toolenv-answer-async`: the same through `astep` inside one event loop, as rollouts do.
* `calc-v0`: the calculator env's oracle episode (one tool call step, one answer step), sync.
* `calc-v0-async`: the same through `astep` in one event loop.

    python benchmarks/env_step.py                 # best of 3 runs of 1 s per case
    python benchmarks/env_step.py --seconds 5 --repeats 5 --json

Best-of-N, because on a shared machine the slowest runs measure the neighbours, not the env.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from agentrl.envs import AgentEnv, Observation, Task, ToolEnv, make
from agentrl.types import Message

ANSWER = Message("assistant", "42")


class NoopEnv(AgentEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return Observation([Message("user", "hi")]), {}

    def step(self, action: Message) -> Any:
        return Observation([]), 1.0, True, False, {}


class AnswerEnv(ToolEnv):
    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        return Task([Message("user", "What is 6 * 7?")], answer="42")

    def score(self, final: Message) -> float:
        return 1.0


def sync_episodes(env: AgentEnv, policy: Callable[[AgentEnv], Message], seconds: float) -> dict:
    steps = episodes = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.reset(seed=episodes)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(policy(env))
            steps, done = steps + 1, term or trunc
        episodes += 1
    dt = time.perf_counter() - t0
    return {"steps_per_s": steps / dt, "episodes_per_s": episodes / dt, "steps": steps}


def async_episodes(env: AgentEnv, policy: Callable[[AgentEnv], Message], seconds: float) -> dict:
    async def run() -> dict:
        steps = episodes = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            env.reset(seed=episodes)  # reset is cheap and sync in ToolEnv; time the step path
            done = False
            while not done:
                _, _, term, trunc, _ = await env.astep(policy(env))
                steps, done = steps + 1, term or trunc
            episodes += 1
        dt = time.perf_counter() - t0
        return {"steps_per_s": steps / dt, "episodes_per_s": episodes / dt, "steps": steps}

    return asyncio.run(run())


def oracle(env: AgentEnv) -> Message:
    action = env.oracle_action()
    assert action is not None
    return action


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="time per run of a case")
    p.add_argument("--repeats", type=int, default=3, help="runs per case; the best is kept")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args()
    cases = {
        "agentenv-noop": lambda: sync_episodes(NoopEnv(), lambda e: ANSWER, args.seconds),
        "toolenv-answer": lambda: sync_episodes(AnswerEnv(), lambda e: ANSWER, args.seconds),
        "toolenv-answer-async": lambda: async_episodes(AnswerEnv(), lambda e: ANSWER, args.seconds),
        "calc-v0": lambda: sync_episodes(make("math/calc-v0"), oracle, args.seconds),
        "calc-v0-async": lambda: async_episodes(make("math/calc-v0"), oracle, args.seconds),
    }
    results = {
        name: max((run() for _ in range(args.repeats)), key=lambda r: r["steps_per_s"])
        for name, run in cases.items()
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'case':<22} {'steps/s':>10} {'episodes/s':>11}")
    for name, r in results.items():
        print(f"{name:<22} {r['steps_per_s']:>10,.0f} {r['episodes_per_s']:>11,.0f}")


if __name__ == "__main__":
    main()
