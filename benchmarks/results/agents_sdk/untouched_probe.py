"""Held-out success of the Agents SDK calculator agent against a running `agentrl serve`.

    agentrl serve --model smollm2-135m-instruct --port 8766 --temperature 0 &
    .venv-harness/bin/python benchmarks/results/agents_sdk/untouched_probe.py math/calc-v0 32

One greedy episode per held-out seed (1,000,000 + i, as the trainer's held-out eval), all at
once, each in its own session (`/s/b{i}/v1`), scored by the env's grader like a harness run.
Produced `untouched_after_fix_32.log` (the untouched model after the grammar fix).
"""

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from agentrl.envs import make  # noqa: E402
from envs.math.calc import numeric_match  # noqa: E402
from examples.harness.agents_sdk_calc import solve  # noqa: E402

PORT = 8766


async def one(env_id: str, s: int) -> float:
    env = make(env_id)
    obs, _ = await env.areset(seed=1_000_000 + s)
    prompt = obs.messages[-1].content
    t = time.time()
    ans = await solve({"prompt": prompt}, f"http://127.0.0.1:{PORT}/s/b{s}/v1")
    r = numeric_match(ans, env.task.answer)
    print(s, repr(prompt), repr(ans[:80]), env.task.answer, r, f"{time.time() - t:.1f}s")
    return r


async def main(env_id: str, n: int) -> None:
    t = time.time()
    rs = await asyncio.gather(*(one(env_id, s) for s in range(n)))
    print("success", sum(rs) / n, f"{time.time() - t:.0f}s")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
