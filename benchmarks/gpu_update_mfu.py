"""The GRPO update alone, on a synthetic single-turn batch: today's path against each lever.

Issue #21 wants the update of `gpu_grpo.py --part agentrl --micro 128 --max-turns 1 --packing
--compile` (0.5B Qwen2 shape, 128 rows, ~21.6k packed tokens, ~3.5k response tokens, one
micro-batch) at >= 40% MFU; it ran at 31-33%, host-bound. This benchmark skips SFT and
rollout: it builds the same model shape (`gpu_grpo.build_checkpoint`), a synthetic batch of
the same shape (prompts 130-154 tokens, 17-37 sampled response tokens, random advantages and
rollout log-probs), and one Actor per variant, built as the assembly builds it
(`trainer.compile`, `trainer.packing`, micro = mini = 128) from the same weights:

- `baseline`: today's path (`update_path: materialized`, no levers);
- `fused`: `trainer.update_path: fused` (the best measured before);
- `host_pack`: `UpdateLevers(host_pack)`: packing on the host, pinned non-blocking copies;
- `traced`: `UpdateLevers(traced_attention)`: one graph per decoder layer, flash called
  directly (`packed_attention_op.packed_causal`);
- `traced_custom_op`: `traced` with attention through the Python custom op instead (how
  `traced` ran before; `packed_attention_op.DIRECT_FLASH` off during its updates);
- `combined`: traced + host_pack + fused (what a packed, fused, compiled config runs);
- `combined_sync`: `combined` with the grad norm read on the host before the optimizer step
  (a host sync, as every update did before this benchmark's 2026-12-04 run);
- `combined_decoder`: combined with `compile_scope: decoder` (one graph for the decoder);
- `combined_cudagraphs`: combined with the layers compiled here in "reduce-overhead" mode
  (CUDA graphs; a measurement of the update without host launch work, not an agentrl option).

Each variant gets one warm-up update (its compile), then the variants alternate for R timed
updates each. Reported per variant: update seconds (mean/min), MFU over the executed FLOPs
(`gpu_grpo.update_flops`) at 989 TFLOP/s, peak memory above the start, dynamo counters of its
warm-up (graph breaks, frames, recompiles) and any compile during the timed updates, the
warm-up's metrics (the variants start from the same weights: entropy and grad norm must agree
to bf16 rounding; the loss of an on-policy pass does not depend on the model), and with
`--profile` one profiled update (device busy share, top ops). A failing variant reports its
error; the others still run. A variant not started within `--budget-s` is skipped. The slow
compiles (whole decoder, CUDA graphs) come after the other variants' timed rounds and
profiles (JSON written), then their rounds alternate with all the others again.

    python benchmarks/gpu_update_mfu.py --json /root/out/gpu_update_mfu.json --profile   # H200
    python benchmarks/gpu_update_mfu.py --device cpu --shape tiny --vocab 1024 --rows 8 \\
        --reps 1 --no-compile                                                         # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_grpo, also when imported
from _gpu_update_diag import (  # noqa: E402
    ClockSampler,
    GcPauses,
    allocator_counts,
    dynamo_snapshot,
    error_text,
    host_counters,
    reset_dynamo_counters,
    thread_cpu_ms,
    top_threads,
)
from gpu_grpo import PEAK_BF16_FLOPS, QWEN05_VOCAB, SHAPES, build_checkpoint, profile_call  # noqa: E402
from gpu_grpo import update_flops as count_flops  # noqa: E402

from agentrl.trainer.gc_control import GcSchedule  # noqa: E402
from agentrl.trainer.levers import UpdateLevers  # noqa: E402

# name: (trainer.update_path, UpdateLevers)
VARIANTS: dict[str, tuple[str, UpdateLevers]] = {
    "baseline": ("materialized", UpdateLevers()),
    "fused": ("fused", UpdateLevers()),
    "host_pack": ("materialized", UpdateLevers(host_pack=True)),
    "traced": ("materialized", UpdateLevers(traced_attention=True)),
    "traced_custom_op": ("materialized", UpdateLevers(traced_attention=True)),
    "combined": ("fused", UpdateLevers(traced_attention=True, host_pack=True)),
    "combined_sync": ("fused", UpdateLevers(traced_attention=True, host_pack=True)),
    "combined_decoder": (
        "fused",
        UpdateLevers(traced_attention=True, host_pack=True, compile_scope="decoder"),
    ),
}
# Measurement only (not an agentrl option): `combined` with each layer compiled in inductor's
# "reduce-overhead" mode (CUDA graphs, recorded per shape): how fast the update gets once
# the host's launch work is gone. One micro-batch per update, as here; not for training use.
CUDA_GRAPHS = {"combined_cudagraphs"}
VARIANTS["combined_cudagraphs"] = VARIANTS["combined"]
# Slow compiles, warmed up in this order after the others' timed rounds (the CUDA-graph
# measurement last: a fault there cannot cost the decoder variant its numbers).
SLOW = ["combined_decoder", "combined_cudagraphs"]
SYNC_NORM = {"combined_sync"}  # the grad norm read on the host (see the docstring)
CUSTOM_OP = {"traced_custom_op"}  # attention through the custom op (see the docstring)
METRICS = ("loss", "entropy", "grad_norm", "rollout_kl", "clip_frac")
CLOCKS = ClockSampler()  # sampling while `main` runs: the SM clock during each update


def synthetic_batch(rows: int, group: int, vocab: int, seed: int, short: bool = False) -> Any:
    """A collated single-turn GRPO batch like gpu_grpo's captured one: groups of `group`
    rows sharing a prompt; old log-probs left out (one on-policy pass)."""
    from agentrl.trainer.batch import collate
    from agentrl.types import Trajectory, TrajectoryGroup

    rng = random.Random(seed)
    prompt_len, resp_len = ((6, 12), (3, 7)) if short else ((130, 154), (17, 37))
    groups = []
    for g in range(max(1, rows // group)):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(*prompt_len))]
        trajs = []
        for _ in range(group):
            t = Trajectory(prompt_ids=list(prompt))
            sampled = [rng.randrange(3, vocab) for _ in range(rng.randint(*resp_len))]
            t.append(sampled, trained=True, logprobs=[-2 * rng.random() for _ in sampled])
            t.reward = float(rng.random() < 0.5)
            trajs.append(t)
        groups.append(TrajectoryGroup(f"g{g}", trajs))
    b = collate(groups, pad_id=0)
    gen = torch.Generator().manual_seed(seed)
    b.advantages = torch.randn(b.size, 1, generator=gen) * b.response_mask
    return b


def build_actor(
    ckpt: Path,
    args: argparse.Namespace,
    path: str,
    levers: UpdateLevers,
    graphs: bool = False,
    sync_norm: bool = False,
) -> Any:
    """An Actor as `assembly.build_learner` builds it, for one variant; `graphs`: its layers
    compiled here in "reduce-overhead" mode instead (see `CUDA_GRAPHS`); `sync_norm`: the
    grad norm read on the host (see `SYNC_NORM`)."""
    from agentrl.backends import build_backend
    from agentrl.config import AlgorithmConfig, ModelConfig, OptimConfig, TrainerConfig
    from agentrl.models.load import load_model
    from agentrl.trainer.actor import Actor
    from agentrl.trainer.threads import apply_cpu_threads

    on_gpu = args.device == "cuda"
    trainer = TrainerConfig(
        steps=100, mini_batch_size=args.rows, micro_batch_size=args.rows,
        logprob_micro_batch_size=2 * args.rows, packing=True, compile=args.compile and not graphs,
        update_path=path, device=args.device, tensorboard=False,  # type: ignore[arg-type]
    )  # fmt: skip
    backend = build_backend("torch", args.device, trainer)
    apply_cpu_threads(args.cpu_threads, backend.device, log=False)  # as the assembly does
    if sync_norm:
        clip = backend.clip_grad_norm
        backend.clip_grad_norm = lambda model, max_norm: float(clip(model, max_norm))  # type: ignore[method-assign]
    model = load_model(ModelConfig(path=str(ckpt), dtype="bfloat16" if on_gpu else "float32"))
    optim = OptimConfig(lr=1e-6)
    actor = Actor(model, backend, AlgorithmConfig(), optim, trainer, 1.0, 100, levers=levers)
    if graphs and args.compile:
        from agentrl.models.compile import decoder_layers

        for layer in decoder_layers(actor.model):
            layer.compile(dynamic=True, mode="reduce-overhead")
    return actor


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_update(
    actor: Any, batch: Any, device: str, graphs: bool = False
) -> tuple[float, float, dict[str, float]]:
    """(seconds, peak GiB above the start, metrics) of one `actor.update(batch)`; `graphs`:
    a new CUDA-graph step begins (the previous update's graph outputs are done with)."""
    if graphs:
        torch.compiler.cudagraph_mark_step_begin()
    sync(device)
    before = allocator_counts(device)
    base = 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    host, threads = host_counters(), thread_cpu_ms()
    t = time.perf_counter()
    with GcPauses() as collections:
        metrics = actor.update(batch)
        sync(device)
    t_end = time.perf_counter()
    seconds = t_end - t
    metrics["threads_cpu_ms"] = top_threads(threads, thread_cpu_ms())  # type: ignore[assignment]
    metrics |= {f"host/{k}": v - host[k] for k, v in host_counters().items() if k in host}
    metrics |= {f"gpu/{k}": v for k, v in CLOCKS.window(t, t_end).items()}
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if device == "cuda" else 0.0
    gc_ms, gc_count = collections.total()
    metrics = dict(metrics, gc_ms=gc_ms, gc_collections=float(gc_count))
    after = allocator_counts(device)
    metrics |= {f"alloc/{k}": float(after[k] - before[k]) for k in after}
    return seconds, peak, metrics


def attention_switch(name: str) -> None:
    """Attention through the custom op for `CUSTOM_OP` variants, the direct call otherwise."""
    from agentrl.models import packed_attention_op

    packed_attention_op.DIRECT_FLASH["on"] = name not in CUSTOM_OP


def run(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Fast-compiling variants first (warm-up, timed rounds, profiles, JSON written), then
    the whole-decoder compile, whose timed rounds alternate with all the others again: a
    long compile killed from outside still leaves the others' complete numbers."""
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpu_update_mfu_"))
    ckpt = build_checkpoint(work / "init", args.shape, args.vocab, args.device)
    short = args.shape == "tiny"
    batch = synthetic_batch(args.rows, args.group, min(args.vocab, 647), args.seed, short)
    out |= {"rows": batch.size, "padded_shape": list(batch.input_ids.shape)}
    names = [v for v in VARIANTS if v in args.variants]
    results: dict[str, dict[str, Any]] = {v: {"errors": []} for v in names}
    out["variants"] = results
    actors: dict[str, Any] = {}
    for phase in ([n for n in names if n not in SLOW], [n for n in SLOW if n in names]):
        if not phase:
            continue
        for name in phase:
            if time.perf_counter() - started > args.budget_s:
                results[name]["skipped"] = f"not started: past --budget-s {args.budget_s}"
                continue
            actor = warm_up(name, results[name], ckpt, batch, args, out)
            if actor is not None:
                actors[name] = actor
            write(out, args.json)
        # Full collections at round boundaries, as the trainer runs them between steps
        # (`trainer.gc_every`, agentrl/trainer/gc_control.py): one after the warm-ups (the
        # compiles), then every --gc-every rounds; their time is outside the updates'.
        schedule = GcSchedule(args.gc_every)
        for i in range(args.reps + 1):
            if (gc_s := schedule.after_step(i + 1)) is not None:
                out.setdefault("gc_boundary_ms", []).append(1e3 * gc_s)
            if i == args.reps:
                break
            for name, actor in list(actors.items()):  # alternate: drift hits all alike
                if not timed_round(name, actor, batch, args.device, results[name]):
                    del actors[name]
        schedule.close()
        finish(results, out.get("flops", 0.0), args.device)
        for name in (n for n in phase if n in actors and args.profile):
            trace = args.trace_dir / f"{name}.json" if args.trace_dir else None
            attention_switch(name)
            results[name]["profile"] = profile(
                actors[name], batch, args.device, name in CUDA_GRAPHS, trace
            )
        out["wall_s"] = time.perf_counter() - started
        write(out, args.json)


def warm_up(
    name: str,
    r: dict[str, Any],
    ckpt: Path,
    batch: Any,
    args: argparse.Namespace,
    out: dict[str, Any],
) -> Any:
    """Build the variant's Actor and run its first (compiling) update; None on failure."""
    path, levers = VARIANTS[name]
    r["update_path"], r["levers"] = path, asdict(levers)
    reset_dynamo_counters()
    t = time.perf_counter()
    try:
        graphs = name in CUDA_GRAPHS
        attention_switch(name)
        actor = build_actor(ckpt, args, path, levers, graphs, name in SYNC_NORM)
        if "flops" not in out:
            out |= batch_flops(actor, batch, SHAPES[args.shape])
        seconds, _, metrics = timed_update(actor, batch, args.device, graphs)
        r["warmup_metrics"] = {k: metrics.get(k) for k in METRICS}  # from the shared weights
        if graphs:  # CUDA graphs: the first run warms up, the second records
            seconds, _, _ = timed_update(actor, batch, args.device, graphs)
    except Exception as e:  # noqa: BLE001 - report it, run the other variants
        r["errors"].append("warm-up: " + error_text(e))
        return None
    r["warmup_s"], r["warmup_update_s"] = time.perf_counter() - t, seconds
    r["dynamo_warmup"] = dynamo_snapshot()
    return actor


def timed_round(name: str, actor: Any, batch: Any, device: str, r: dict[str, Any]) -> bool:
    """One timed update of variant `name` into `r`; False (error recorded) if it failed."""
    reset_dynamo_counters()
    attention_switch(name)
    try:
        seconds, peak, metrics = timed_update(actor, batch, device, name in CUDA_GRAPHS)
    except Exception as e:  # noqa: BLE001
        r["errors"].append("timed: " + error_text(e))
        return False
    r["last_metrics"] = {k: metrics.get(k) for k in METRICS}
    r["frames_compiled_during_timed"] = r.get("frames_compiled_during_timed", 0) + (
        dynamo_snapshot()["frames"].get("total", 0)
    )
    r.setdefault("update_s", []).append(seconds)
    r.setdefault("gc_ms", []).append(metrics["gc_ms"])
    allocs = {k: v for k, v in metrics.items() if k.startswith("alloc/")}
    r.setdefault("allocator_calls", []).append(allocs)  # per timed update, beside update_s
    diag = {k: v for k, v in metrics.items() if k.startswith(("host/", "gpu/"))}
    r.setdefault("diag", []).append(diag)  # per timed update: scheduling and SM clock
    r.setdefault("threads_cpu_ms", []).append(metrics.get("threads_cpu_ms", {}))
    r["peak_gib_above_start"] = max(r.get("peak_gib_above_start", 0.0), peak)
    return True


def finish(results: dict[str, dict[str, Any]], flops: float, device: str) -> None:
    for r in results.values():
        summarize(r, flops, device)
    base = results.get("baseline", {}).get("update_s_mean")
    for r in results.values():
        mean = r.get("update_s_mean")
        r["speedup_vs_baseline"] = base / mean if base and mean else None


def batch_flops(actor: Any, batch: Any, shape: dict[str, Any]) -> dict[str, Any]:
    model = actor.model
    n_params = sum(p.numel() for p in model.parameters())  # tied: the lm head counted once
    embed = float(model.get_output_embeddings().weight.numel())
    width = shape["num_attention_heads"] * (shape["hidden_size"] // shape["num_attention_heads"])
    return count_flops(batch, n_params, embed, shape["num_hidden_layers"], width)


def summarize(r: dict[str, Any], flops: float, device: str) -> None:
    runs = r.get("update_s", [])
    if not runs:
        return
    mean, best = sum(runs) / len(runs), min(runs)
    on_gpu = device == "cuda"
    r["slow_vs_fast"] = slow_vs_fast(runs, r.get("diag", []), r.get("threads_cpu_ms", []))
    r["update_s_mean"], r["update_s_min"] = mean, best
    r["mfu"] = flops / mean / PEAK_BF16_FLOPS if on_gpu else None
    r["mfu_best"] = flops / best / PEAK_BF16_FLOPS if on_gpu else None


def slow_vs_fast(
    runs: list[float], diag: list[dict[str, float]], threads: list[dict[str, float]]
) -> dict[str, Any]:
    """The per-update diagnostics averaged over the slow updates (> 1.15x the median) and
    the others: which of them moves with the time is the outliers' suspect; `threads`: the
    busiest threads' CPU ms per update, averaged the same way (the five busiest kept)."""
    if len(diag) != len(runs) or not runs:
        return {}
    median = sorted(runs)[len(runs) // 2]
    out: dict[str, Any] = {"median_s": median}
    for name, pick in (
        ("slow", lambda s: s > 1.15 * median),
        ("fast", lambda s: s <= 1.15 * median),
    ):
        rows = [d for s, d in zip(runs, diag, strict=True) if pick(s)]
        keys = sorted({k for d in rows for k in d})
        out[name] = {"updates": len(rows), "update_s_mean": 0.0}
        if rows:
            out[name]["update_s_mean"] = sum(s for s in runs if pick(s)) / len(rows)
            out[name] |= {k: sum(d.get(k, 0.0) for d in rows) / len(rows) for k in keys}
            mask = 0
            for d in rows:
                mask |= int(d.get("gpu/clock_reasons", 0))
            out[name]["gpu/clock_reasons_any"] = mask
        if len(threads) == len(runs):
            cpu: dict[str, float] = {}
            for d in (t for s, t in zip(runs, threads, strict=True) if pick(s)):
                for k, v in d.items():
                    cpu[k] = cpu.get(k, 0.0) + v / max(len(rows), 1)
            out[name]["threads_cpu_ms"] = dict(sorted(cpu.items(), key=lambda kv: -kv[1])[:5])
    return out


def profile(
    actor: Any, batch: Any, device: str, graphs: bool = False, trace: Path | None = None
) -> dict[str, Any]:
    def update() -> dict[str, float]:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return actor.update(batch)

    try:
        prof = profile_call(update, device, trace=trace)
    except Exception as e:  # noqa: BLE001 - the timings stand
        return {"error": error_text(e)}
    for key in ("top_device_ops", "top_host_ops"):
        prof[key] = prof.get(key, [])[:15]
    return prof


def summary_lines(out: dict[str, Any]) -> list[str]:
    lines = [f"batch: {out.get('tokens', 0):.0f} tokens, {out.get('logit_tokens', 0):.0f} "
             f"logit tokens, {out.get('flops', 0) / 1e12:.1f} TFLOP per update"]  # fmt: skip
    for name, r in out.get("variants", {}).items():
        if "update_s_mean" not in r:
            why = r.get("skipped") or (r["errors"][0].split("\n")[0] if r["errors"] else "?")
            lines.append(f"{name:>19}: no timing ({why[:300]})")
            continue
        mfu = f"{100 * r['mfu']:.1f}% MFU (best {100 * r['mfu_best']:.1f}%), " if r["mfu"] else ""
        busy = r.get("profile", {}).get("device_busy_fraction")
        dyn, m = r.get("dynamo_warmup", {}), r.get("warmup_metrics", {})
        lines.append(
            f"{name:>19}: {mfu}{1e3 * r['update_s_mean']:.1f} ms mean, "
            f"{1e3 * r['update_s_min']:.1f} ms min, x{r['speedup_vs_baseline'] or 0:.3f}, "
            f"+{r.get('peak_gib_above_start', 0):.1f} GiB, warm-up {r['warmup_s']:.0f} s, "
            f"breaks {dyn.get('graph_breaks')}, frames {dyn.get('frames', {}).get('total')}"
            + (f", busy {busy:.2f}" if busy is not None else "")
            + f", gc {sum(r.get('gc_ms', [])):.0f} ms"
            + f", warm-up entropy {num(m.get('entropy'))} grad norm {num(m.get('grad_norm'))}"
        )
        split = r.get("slow_vs_fast", {})
        for side in ("slow", "fast"):
            d = split.get(side, {})
            if d.get("updates"):
                lines.append(f"{'':>19}  {side}: {d['updates']} updates, "
                             f"{1e3 * d['update_s_mean']:.1f} ms, " + ", ".join(
                                 f"{k}={v:.1f}" for k, v in d.items()
                                 if k.startswith(("host/", "gpu/")) and isinstance(v, float))
                             + f", threads {d.get('threads_cpu_ms', {})}")  # fmt: skip
    return lines


def num(x: Any) -> str:
    return f"{x:.6f}" if isinstance(x, float) else str(x)


def write(out: dict[str, Any], path: Path | None) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, default=str))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    p.add_argument("--vocab", type=int, default=QWEN05_VOCAB)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", type=int, default=128, help="rows per update (= micro = mini)")
    p.add_argument("--group", type=int, default=8, help="rows sharing a prompt")
    p.add_argument("--reps", type=int, default=5, help="timed updates per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="trainer.compile off (CPU smoke)")  # fmt: skip
    p.add_argument("--profile", action="store_true", help="one profiled update per variant")
    p.add_argument("--trace-dir", type=Path, default=None,
                   help="with --profile: a Chrome trace per variant there")  # fmt: skip
    p.add_argument("--budget-s", type=float, default=200.0,
                   help="variants not started by then are skipped")  # fmt: skip
    p.add_argument("--gc-every", type=int, default=50,
                   help="full collections every N rounds, as trainer.gc_every (0: Python's)")  # fmt: skip
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=0,
        help="trainer.cpu_threads (0: the trainer's auto; one on CUDA)",
    )
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    import torch._dynamo
    import transformers

    for knob in ("recompile_limit", "cache_size_limit"):  # variants share code objects
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    out: dict[str, Any] = {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "argv": sys.argv[1:] if argv is None else argv,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "peak_flops": PEAK_BF16_FLOPS,
        },
        "shape": args.shape,
        "vocab": args.vocab,
    }
    CLOCKS.active = CLOCKS.active and args.device == "cuda"  # a CPU run samples nothing
    with CLOCKS:
        if CLOCKS.active:
            out["foreign_gpu_processes"] = CLOCKS.foreign_processes()
            time.sleep(1.0)  # a second of the idle device: is anyone else running on it?
            out["idle_device"] = CLOCKS.window(0.0, time.perf_counter())
        try:
            run(args, out)
        except Exception as e:  # noqa: BLE001 - whatever ran is still written
            out["error"] = error_text(e)
    write(out, args.json)
    for line in summary_lines(out):
        print(line, flush=True)
    if "error" in out:
        print("ERROR:", out["error"], flush=True)
    return out


if __name__ == "__main__":
    main()
