"""Agent start-up per harness run: a fresh interpreter per run vs runs forked from a warm
parent (`rollout.harness.preload`), same agent, same concurrency, alternating rounds.

The agent (`_sdk_import_agent.py`) imports what `examples/harness/agents_sdk_calc.py` imports
(the OpenAI Agents SDK) and answers without calling a model, so a run costs its start-up: what
every episode of an Agents SDK harness pays before its first request reaches the gateway. The
peer is agentrl's own default (`preload: []`, one fresh `python` per run). CPU is the runs'
own (user + system, from the reaped children's accounting: the benchmark's for fresh runs,
the warm parent's for forked ones); the parent's one-off preload is shown apart.

    .venv-harness/bin/python benchmarks/harness_startup.py --runs 16 --concurrency 4 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
AGENT = "_sdk_import_agent:agent"
PRELOAD = ["agents", "openai"]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(fields[i]) / tick for i in (11, 12, 13, 14))
    return utime + stime, cutime + cstime


async def one_round(warm: bool, runs: int, concurrency: int) -> dict[str, Any]:
    from agentrl.config.schema import HarnessConfig
    from agentrl.rollout.harness import run_agent, warm_parent

    cfg = HarnessConfig(agent=AGENT, timeout_s=300, preload=PRELOAD if warm else [])
    parent = warm_parent(cfg)
    preload_s = 0.0
    if parent is not None:
        t = time.perf_counter()
        await parent.start()
        preload_s = time.perf_counter() - t
    sem = asyncio.Semaphore(concurrency)

    async def run(i: int) -> str:
        async with sem:
            r = await run_agent(cfg, {"prompt": "x"}, "http://127.0.0.1:9", f"b{i}", parent)
        assert r.status == "ok" and r.result == {"answer": "started"}, r
        return r.status

    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(runs)))
    wall = time.perf_counter() - t0
    if parent is not None:
        assert parent.pid is not None
        own, reaped = _proc_cpu(parent.pid)
        await parent.close()
        cpu = reaped
    else:
        own, cpu = 0.0, _children_cpu() - cpu0
    return {
        "mode": "warm" if warm else "fresh",
        "runs": runs,
        "wall_s": wall,
        "wall_per_run_s": wall / runs,
        "cpu_per_run_s": cpu / runs,
        "parent_start_s": preload_s,
        "parent_cpu_s": own,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    os.chdir(REPO)  # `examples.harness` imports from the repository root, as the docs say
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "benchmarks"), str(REPO)])
    rows = []
    for r in range(args.rounds):
        for warm in (False, True) if r % 2 == 0 else (True, False):
            row = asyncio.run(one_round(warm, args.runs, args.concurrency))
            print(json.dumps(row), flush=True)
            rows.append(row)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in rows if x["mode"] == mode)

    print(f"\n{args.runs} runs x {args.rounds} rounds, concurrency {args.concurrency}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; medians:")  # fmt: skip
    print("| | wall per run | CPU per run |\n|---|---:|---:|")
    for mode in ("fresh", "warm"):
        print(
            f"| {mode} | {med(mode, 'wall_per_run_s'):.3f} s | {med(mode, 'cpu_per_run_s'):.3f} s |"
        )
    print(f"| ratio (fresh / warm) | {med('fresh', 'wall_per_run_s') / med('warm', 'wall_per_run_s'):.2f}x "
          f"| {med('fresh', 'cpu_per_run_s') / med('warm', 'cpu_per_run_s'):.2f}x |")  # fmt: skip
    print(f"warm parent start (preload {PRELOAD}): {med('warm', 'parent_start_s'):.2f} s wall, "
          f"{med('warm', 'parent_cpu_s'):.2f} s CPU, once per run of the trainer")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())
