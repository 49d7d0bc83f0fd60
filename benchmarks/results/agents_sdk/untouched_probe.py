"""Held-out success of an Agents SDK agent against a running `agentrl serve`.

    agentrl serve --model smollm2-135m-instruct --port 8766 --temperature 0 &
    .venv-harness/bin/python benchmarks/results/agents_sdk/untouched_probe.py math/calc-v0 32
    .venv-harness/bin/python benchmarks/results/agents_sdk/untouched_probe.py math/word-v0 16 \
        --env-kwargs '{"level": 2}'

One greedy episode per held-out seed (1,000,000 + i, as the trainer's held-out eval), all at
once, each in its own session (`/s/b{i}/v1`), scored by the env's grader like a harness run.
`--agent module:fn` picks the agent (default the calculator agent's `solve`).
Produced `untouched_after_fix_32.log` (the untouched model after the grammar fix) and the
`untouched_word_*.log` files (the word-problem task of the GPU recipe).
"""

import argparse
import asyncio
import importlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from agentrl.envs import make  # noqa: E402


async def one(args: argparse.Namespace, solve, s: int) -> float:
    env = make(args.env, **json.loads(args.env_kwargs))
    obs, _ = await env.areset(seed=1_000_000 + s)
    prompt = obs.messages[-1].content
    t = time.time()
    url = f"http://127.0.0.1:{args.port}/s/b{s}/v1"
    ans = await asyncio.wait_for(solve({"prompt": prompt}, url), args.timeout_s)
    from agentrl.types import Message

    r = env.score(Message("assistant", ans))
    print(s, repr(prompt), repr(ans[:80]), env.task.answer, r, f"{time.time() - t:.1f}s")
    return r


async def main(args: argparse.Namespace) -> None:
    module, fn = args.agent.split(":")
    solve = getattr(importlib.import_module(module), fn)
    t = time.time()
    rs = await asyncio.gather(*(one(args, solve, s) for s in range(args.episodes)))
    print("success", sum(rs) / args.episodes, f"{time.time() - t:.0f}s")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("env")
    p.add_argument("episodes", type=int)
    p.add_argument("--env-kwargs", default="{}")
    p.add_argument("--agent", default="examples.harness.agents_sdk_calc:solve")
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--timeout-s", type=float, default=3600)
    asyncio.run(main(p.parse_args()))
