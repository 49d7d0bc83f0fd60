"""The gateway's own overhead per call against the engine's time, at 64 concurrent sessions.

The real server (uvicorn on loopback, `create_app`) over a real engine (`build_engine`, as
`agentrl serve` builds it), driven by `--sessions` concurrent clients, each a multi-turn
session (a user turn, then `--turns - 1` tool results appended to its own history), with the
real `httpx` client in another process (so the client's work is not counted against the
server). The engine is wrapped to time each `generate` call; per call,

    overhead = server-side request time - engine time of that call

where the server-side time runs from the moment the route starts until the response is
built (body read, JSON, checks, rendering, tokenising, recording, response building, event
loop waits), measured by an ASGI wrapper around the app. Printed: the ratio of the summed
overheads to the summed engine times (the criterion: < 5%), the same per percentile, and
whether sessions block each other (the largest gap between an engine call finishing and its
response leaving, across all sessions: a session holding the loop would show there).

    python benchmarks/serve_overhead.py --model tiny:qwen2 --sessions 64 --turns 3
    python benchmarks/serve_overhead.py --model /path/to/SmolLM2-135M-Instruct --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentrl.cli.rollout import build_engine
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import Engine, GenerateResult, SamplingParams
from agentrl.serve import create_app
from agentrl.serve.limits import ServeLimits

CLIENT = r"""
import asyncio, json, sys, time
import httpx
url, sessions, turns, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

async def session(client, i):
    msgs = [{"role": "user", "content": f"What is {i * 37 % 1000} + {i * 91 % 1000} * {i % 9}?"}]
    for t in range(turns):
        r = await client.post(f"{url}/s/bench-{i}/v1/chat/completions", json={
            "model": "m", "messages": msgs, "temperature": 1.0, "seed": i * 100 + t,
            "max_tokens": max_tokens})
        r.raise_for_status()
        msg = r.json()["choices"][0]["message"]
        msgs.append({k: v for k, v in msg.items() if v is not None})
        for c in msg.get("tool_calls") or []:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": str(t)})
        if not msg.get("tool_calls"):
            msgs.append({"role": "user", "content": f"and now {t}?"})

async def main():
    limits = httpx.Limits(max_connections=sessions + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(session(client, i) for i in range(sessions)))
        print(json.dumps({"wall_s": time.perf_counter() - start}))

asyncio.run(main())
"""


class Timed(Engine):
    """The real engine, each `generate` call timed (start, end) per session."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.features = inner.features
        self.calls: dict[str | None, list[tuple[float, float]]] = {}

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, **kw: Any
    ) -> GenerateResult:
        start = time.perf_counter()
        out = await self.inner.generate(prompt_ids, params, **kw)
        self.calls.setdefault(kw.get("session_id"), []).append((start, time.perf_counter()))
        return out

    def update_weights(self, named_tensors: Any) -> None:
        self.inner.update_weights(named_tensors)


class RequestTimes:
    """ASGI wrapper: each generation request's (session, start, end) on the server."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.spans: list[tuple[str, float, float]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        await self.app(scope, receive, send)
        self.spans.append((scope["path"].split("/")[2], start, time.perf_counter()))


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny:qwen2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-batch-size", type=int, default=64)
    args = p.parse_args()

    import uvicorn

    inner, chat = build_engine(args.model, args.device, args.max_batch_size, fast=False)
    engine = Timed(inner)
    app = create_app(
        engine,
        chat,
        sampling=SamplingConfig(max_new_tokens=args.max_tokens),
        limits=ServeLimits(max_prompt_tokens=4096),
    )
    timed = RequestTimes(app)
    server = uvicorn.Server(uvicorn.Config(timed, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    warm = [url, "2", "1", str(args.max_tokens)]
    subprocess.run([sys.executable, "-c", CLIENT, *warm], check=True, capture_output=True)
    engine.calls.clear()
    timed.spans.clear()
    cmd = [
        sys.executable,
        "-c",
        CLIENT,
        url,
        str(args.sessions),
        str(args.turns),
        str(args.max_tokens),
    ]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = json.loads(res.stdout.strip().splitlines()[-1])["wall_s"]
    server.should_exit = True
    thread.join(timeout=10)

    over, eng, gaps = [], [], []
    by_session: dict[str, list[tuple[float, float]]] = {}
    for sid, start, end in timed.spans:
        by_session.setdefault(sid, []).append((start, end))
    for sid, spans in by_session.items():
        calls = engine.calls.get(sid, [])
        assert len(calls) == len(spans), (sid, len(calls), len(spans))
        for (s0, s1), (e0, e1) in zip(sorted(spans), sorted(calls), strict=True):
            eng.append(e1 - e0)
            over.append((s1 - s0) - (e1 - e0))
            gaps.append(s1 - e1)
    ratio = sum(over) / sum(eng)
    print(
        f"model {args.model} on {args.device}: {args.sessions} sessions x {args.turns} turns, "
        f"{len(eng)} calls in {wall:.2f}s"
    )
    print(
        f"engine time per call: mean {statistics.mean(eng) * 1e3:.1f} ms, "
        f"p50 {pct(eng, 0.5) * 1e3:.1f} ms, p99 {pct(eng, 0.99) * 1e3:.1f} ms"
    )
    print(
        f"gateway overhead per call: mean {statistics.mean(over) * 1e3:.2f} ms, "
        f"p50 {pct(over, 0.5) * 1e3:.2f} ms, p99 {pct(over, 0.99) * 1e3:.2f} ms"
    )
    print(
        f"response after the engine finished (blocking): p50 {pct(gaps, 0.5) * 1e3:.2f} ms, "
        f"max {max(gaps) * 1e3:.2f} ms"
    )
    print(f"overhead / engine time = {ratio:.2%} (criterion: < 5%)")


if __name__ == "__main__":
    main()
