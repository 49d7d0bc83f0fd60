"""Rollout overlap: do slow tools run concurrently with each other and with generation?

64 episodes run through `RolloutRunner` on the HF engine, with the tiny Qwen2 briefly
fine-tuned on calc-v0 demos (the tests' `agent_model`; a random-init model never stops, so
its episodes would end `overlong` before any tool call). The
env is `math/calc-v0` with a calculator that sleeps 0.5 s per call (a sync tool, so it runs
in a worker thread as user tools do); the model calls it, then answers.
Serially the tool time alone would be 64 x 0.5 s = 32 s; with overlap the whole batch
should take about one tool latency plus generation time.

    python benchmarks/rollout_overlap.py [--episodes 64] [--sleep 0.5]

Prints wall time with the sleeping tool, wall time with an instant tool (the generation-only
baseline), and both as ratios of the serial bound. Not a timed test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.hf import HFEngine
from agentrl.envs.math.calc import CalcEnv
from agentrl.rollout import RolloutRunner
from agentrl.tools.calculator import calculator
from agentrl.tools.core import ToolSet, tool

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "rollout"))
from agent_model import agent_path  # noqa: E402

SLEEP_S = 0.5


def slow_calculator(expression: str) -> str:
    time.sleep(SLEEP_S)
    return calculator(expression)


# Same name, signature and docstring as the real calculator, so the prompt is the one the
# fine-tuned model was trained on and it calls the tool as it learned to.
slow_calculator.__doc__ = calculator.__doc__
slow_calculator = tool(slow_calculator, name="calculator", timeout_s=10.0)


class SlowCalcEnv(CalcEnv):
    """`math/calc-v0` whose calculator takes SLEEP_S seconds per call."""

    def __init__(self) -> None:
        super().__init__()
        self.tools = ToolSet.of(slow_calculator)


def run(episodes: int, engine: HFEngine, chat: ChatFormat) -> tuple[float, dict[str, float]]:
    cfg = RolloutConfig(n=1, max_turns=3, max_total_tokens=1024, concurrency=episodes)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=64)
    runner = RolloutRunner(engine, chat, SlowCalcEnv, cfg, sampling, seed=0)  # same tokens per run
    t0 = time.perf_counter()
    groups = runner.collect_sync(list(range(episodes)), 1)
    wall = time.perf_counter() - t0
    runner.close(close_engine=True)
    stats = dict(runner.last_stats)
    stats["tool_episodes"] = sum(
        bool(t.turns[0].tool_results) for g in groups for t in g.trajectories if t.turns
    )
    return wall, stats


def main() -> None:
    global SLEEP_S
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--sleep", type=float, default=0.5)
    args = ap.parse_args()
    path = agent_path()
    tok = AutoTokenizer.from_pretrained(path)
    chat = ChatFormat(tok)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(0)

    def engine() -> HFEngine:
        return HFEngine(model, tok, max_batch_size=args.episodes)

    run(8, engine(), chat)  # warm-up
    SLEEP_S = 0.0
    base, _ = run(args.episodes, engine(), chat)
    SLEEP_S = args.sleep
    wall, stats = run(args.episodes, engine(), chat)
    serial = args.episodes * args.sleep
    print(
        f"episodes={args.episodes} tool_sleep={args.sleep}s "
        f"called_tool={int(stats['tool_episodes'])} turns/episode={stats['turns_mean']:.2f} "
        f"sampled_tokens={int(stats['sampled_tokens'])}"
    )
    calls = int(stats["tool_calls"])
    print(
        f"serial tool bound      {serial:8.2f} s  ({calls} calls made: {calls * args.sleep:.1f} s)"
    )
    print(f"wall, instant tool     {base:8.2f} s  (generation-only baseline)")
    print(f"wall, sleeping tool    {wall:8.2f} s  ratio to serial bound {wall / serial:.3f}")
    print(f"tool latency added     {wall - base:8.2f} s  (ideal: {args.sleep:.2f} s)")


if __name__ == "__main__":
    main()
