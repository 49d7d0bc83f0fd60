"""`bench/calc-tool-latency-v0`: `math/calc-v0` whose tool calls take `uniform(lo, hi)` seconds.

A module of its own (`data.env_modules`), so a rollout child process
(`trainer.async.producer: process`) registers it too. The sleep is an asyncio sleep: other
episodes keep the engine busy meanwhile. Latencies are seeded by the task (reset seed), so
every mode of a benchmark sees the same ones.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from agentrl.envs import register
from agentrl.envs.math.calc import CalcEnv

ENV_ID = "bench/calc-tool-latency-v0"


class SlowToolCalc(CalcEnv):
    def __init__(self, latency: tuple[float, float] = (0.0, 0.0), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.latency = (float(latency[0]), float(latency[1]))
        self._latency_rng = random.Random(0)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self._latency_rng = random.Random(seed)
        return super().reset(seed=seed, options=options)

    async def astep(self, action: Any) -> Any:
        lo, hi = self.latency
        if action.tool_calls and hi > 0:
            await asyncio.sleep(self._latency_rng.uniform(lo, hi))
        return await super().astep(action)


register(ENV_ID, SlowToolCalc, description="calc-v0 with simulated tool latency")
