"""SWE workspace costs: reset, tool-call latency, grading, episodes/s at 32-way concurrency.

    python benchmarks/swe_workspace.py [--backends local docker] [--episodes 32] [--json out.json]

Peers measured in the same run: workspace reset against copying the repo tree to a fresh
directory (``shutil.copytree``, what a per-episode checkout costs), and a sandboxed ``bash``
command against the same command run unsandboxed on the host (``subprocess``), i.e. the price
of isolation. An episode is what the oracle does: reset, ``view`` the buggy file, one
``str_replace``, one ``bash`` command, ``submit`` (grading runs the package's whole suite).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agentrl.envs import make
from agentrl.envs.swe import grade as grading
from agentrl.envs.swe.tasks import load_tasks, materialize
from agentrl.sandboxes.workspace import Workspace
from agentrl.types import Message, ToolCall


def _median(f, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def reset_costs(task) -> dict:
    tree = grading.workspace_tree(task)
    ws = Workspace(tree)
    ours = _median(ws.reset, 2000)
    with tempfile.TemporaryDirectory() as tmp:
        src = materialize(tree, Path(tmp) / "src")

        def copy() -> None:
            dst = Path(tmp) / "dst"
            shutil.copytree(src, dst)
            shutil.rmtree(dst)

        peer = _median(copy, 50)
    return {"files": len(tree), "reset_s": ours, "copytree_s": peer, "ratio": peer / ours}


def command_costs(backend: str, task) -> dict:
    ws = Workspace(grading.workspace_tree(task), backend)
    sandboxed = _median(lambda: ws.run("ls > /dev/null; echo ok"), 10)
    host = _median(
        lambda: subprocess.run(
            ["bash", "-c", "ls > /dev/null; echo ok"], check=True, capture_output=True
        ),
        10,
    )
    grade = _median(lambda: grading.grade(task, ws.files(), backend), 3)
    return {
        "bash_s": sandboxed,
        "host_bash_s": host,
        "isolation_x": sandboxed / host,
        "grade_s": grade,
    }


async def _episode(env_id: str, backend: str, seed: int) -> float:
    env = make(env_id, backend=backend)
    await env.areset(seed=seed)
    task = env.task.answer
    fix = env.oracle_action()  # the oracle's edit must be its first action
    view = ToolCall("view", {"path": task.mutation.file}, id="v")
    await env.astep(Message("assistant", "", tool_calls=[view]))
    await env.astep(fix)
    ls = ToolCall("bash", {"command": "ls"}, id="b")
    await env.astep(Message("assistant", "", tool_calls=[ls]))
    _, reward, *_ = await env.astep(env.oracle_action())
    return reward


async def concurrency(env_id: str, backend: str, episodes: int) -> dict:
    t0 = time.perf_counter()
    rewards = await asyncio.gather(*(_episode(env_id, backend, s) for s in range(episodes)))
    wall = time.perf_counter() - t0
    return {
        "episodes": episodes,
        "wall_s": wall,
        "episodes_per_s": episodes / wall,
        "mean_reward": sum(rewards) / len(rewards),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", nargs="+", default=["local"])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--env", default="swe/tiny-repo-v0")
    ap.add_argument("--json")
    args = ap.parse_args()
    tasks = load_tasks()
    task = next(t for t in tasks if t.package == "minilib")
    real = next((t for t in tasks if t.spec.archive), None)
    out: dict = {
        "machine": platform.node(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load": open("/proc/loadavg").read().split()[:3],
    }
    out["reset_minilib"] = reset_costs(task)
    if real is not None:
        out[f"reset_{real.package}"] = reset_costs(real)
    per_package: dict[str, int] = {}
    for t in tasks:
        per_package[t.package] = per_package.get(t.package, 0) + 1
    out["tasks_per_package"] = per_package
    for backend in args.backends:
        out[backend] = command_costs(backend, task)
        out[backend]["concurrent"] = asyncio.run(concurrency(args.env, backend, args.episodes))
        print(backend, json.dumps(out[backend]), flush=True)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
