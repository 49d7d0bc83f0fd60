"""Latency of one isolated docker-sandbox run: warm containers vs a fresh container per run.

The peer is the usual way code sandboxes use docker, one new container per request (our
`DockerBackend(pool_size=0)`); agentrl's default keeps `pool_size` containers started ahead
of need (`sandboxes/_docker_pool.py`), each still serving exactly one run. Runs are spaced so
the pool is full each time (an isolated tool call or reward check, not a saturated batch:
under saturation the docker daemon's create/start/remove throughput bounds both).

    python benchmarks/sandbox_docker_latency.py [--runs 8] [--pool 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from agentrl.sandboxes import ExecRequest
from agentrl.sandboxes.docker_backend import DockerBackend


def latencies(pool: int, runs: int) -> list[float]:
    backend = DockerBackend(pool_size=pool)
    out = []
    try:
        for _ in range(runs):
            deadline = time.monotonic() + 30
            while pool and backend.pool._ready.qsize() < pool and time.monotonic() < deadline:
                time.sleep(0.02)
            if not pool:
                time.sleep(0.3)  # same spacing as the warm case
            t = time.perf_counter()
            res = backend.run(ExecRequest("print(1)", timeout_s=10))
            out.append(time.perf_counter() - t)
            if res.stdout.strip() != "1":
                raise RuntimeError(f"sandbox run failed: {res}")
    finally:
        backend.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--pool", type=int, default=2)
    args = ap.parse_args()
    cold = statistics.median(latencies(0, args.runs))
    warm = statistics.median(latencies(args.pool, args.runs))
    print(f"fresh container per run (pool_size=0): median {cold * 1e3:.0f} ms")
    print(f"warm containers (pool_size={args.pool}): median {warm * 1e3:.0f} ms")
    print(f"ratio (fresh / warm): {cold / warm:.1f}x")


if __name__ == "__main__":
    main()
