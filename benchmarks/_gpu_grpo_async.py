"""`gpu_grpo.py --max-staleness 0 1:process ...`: the synchronous loop vs pipelined steps.

Why it exists: issue #21's measurement. The multi-turn tool workload (`math/calc-v0`, up to 3
turns) gets a simulated tool latency (`--tool-latency LO HI`: `_latency_env.py`, uniform,
seeded per task and turn so every mode sees the same latencies). Each mode is
`K[:producer[:concurrency]][,override...]`: `trainer.async.max_staleness` K,
`trainer.async.producer` (thread: the rollout in the trainer's process; process: in a child
process of its own), `rollout.concurrency` = `engine.max_batch_size` (default: the batch,
every episode of a step in flight, as the synchronous loop runs them), and config
`key=value` overrides as `agentrl train` takes them (`engine.hf.tuning.join_every=4`),
`python.switchinterval=S`, `bench.lever.NAME=V` (a code-level lever of the hf engines,
`own_stream=false` or `prefill_graphs=true`, set on the engine this process builds; not with
a rollout process), or `bench.stack_sample` (sample every thread's stack over the
timed steps, `diagnostics/stack_sampler.py`; `--stack-sample` does it in every mode). Each mode builds fresh components from the same SFT'd checkpoint,
runs `--warmup` steps, then `--steps` timed steps through the real `Trainer.train_step` with
the pipeline started as `Trainer.train` starts it. Reported per
mode: end-to-end sampled tok/s (trained tokens / wall of the timed steps) and its ratio to
the first mode, the GPU busy share and peak device memory over the timed steps from NVML
(device-wide, so the rollout child's kernels and memory count too; torch.profiler would only
see this process), the trainer process's own peak allocation, and the staleness metrics.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _gpu_update_diag import (
    GcPauses,
    NvmlProbe,
    ThreadedProbe,
    host_counters,
    thread_cpu_ms,
    top_threads,
)
from diagnostics.stack_sampler import StackSampler

HERE = Path(__file__).resolve().parent


def parse_mode(text: str, batch: int) -> dict[str, Any]:
    """`K[:producer[:concurrency]][,key=value...]` -> the mode's settings. The `key=value`
    parts are config overrides as `agentrl train` takes them (`engine.hf.tuning.join_every=4`),
    `python.switchinterval=S` (`sys.setswitchinterval` for the mode), or `bench.lever.NAME=V`
    (an engine lever, `set_engine_levers`)."""
    head, *overrides = str(text).split(",")
    parts = head.split(":")
    k = int(parts[0])
    producer = parts[1] if len(parts) > 1 and parts[1] else "thread"
    conc = int(parts[2]) if len(parts) > 2 else batch
    return {
        "name": str(text),
        "k": k,
        "producer": producer,
        "concurrency": conc,
        "overrides": overrides,
    }


class DeviceSampler(NvmlProbe):
    """NVML every `period` s on a thread: mean GPU utilisation (share of time a kernel ran,
    any process), peak used memory and the SM clock (a capped clock slows every kernel).
    Empty when NVML is unavailable."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.util, self.used, self.sm_mhz = period, [], [], []
        super().__init__("nvml-sampler")

    def _run(self) -> None:
        n, h = self._nvml, self._h
        while not self._stop.wait(self.period):
            self.util.append(n.nvmlDeviceGetUtilizationRates(h).gpu)
            self.used.append(n.nvmlDeviceGetMemoryInfo(h).used)
            self.sm_mhz.append(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))

    def result(self) -> dict[str, Any]:
        if not self.util:
            return {}
        return {
            "gpu_busy_share_nvml": sum(self.util) / len(self.util) / 100.0,
            "peak_device_used_gib": max(self.used) / 2**30,
            "nvml_samples": len(self.util),
            "sm_mhz_mean": sum(self.sm_mhz) / max(len(self.sm_mhz), 1),
            "sm_mhz_min": min(self.sm_mhz, default=0),
        }


class GilProbe(ThreadedProbe):
    """How long a thread waits for the interpreter lock in this process: a thread sleeps
    `period` s in a loop and records how late it wakes. Sleeping releases the lock, so the
    lateness is (almost all) the wait to take it back; near the switch interval (5 ms by
    default) on average, the lock is saturated. The rollout child's lock is not seen."""

    def __init__(self, period: float = 0.002) -> None:
        self.period, self.late = period, []
        super().__init__("gil-probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.period)
            self.late.append(time.perf_counter() - t - self.period)

    def result(self) -> dict[str, Any]:
        late = sorted(self.late)
        if not late:
            return {}
        pick = lambda q: 1e3 * late[min(len(late) - 1, int(q * len(late)))]  # noqa: E731
        return {
            "gil_wait_ms_mean": 1e3 * sum(late) / len(late),
            "gil_wait_ms_p50": pick(0.5),
            "gil_wait_ms_p90": pick(0.9),
            "gil_wait_ms_max": 1e3 * late[-1],  # a stall (a full collection) shows here
            "gil_probe_samples": len(late),
        }


def configure(cfg: Any, args: Any, mode: dict[str, Any]) -> Any:
    """The latency env (from its module, so a rollout child finds it too), the fast engine
    through its typed config (a child builds its own engine from it, so `--engine-extra`
    reaches it too), the mode's settings and overrides. Returns the new config."""
    from gpu_grpo import engine_extra

    from agentrl.config import TrainConfig, apply_override, from_dict, to_dict

    cfg.data.env = "bench/calc-tool-latency-v0"
    cfg.data.env_modules = [str(HERE / "_latency_env.py")]
    cfg.data.env_kwargs = {"latency": list(args.tool_latency)}
    cfg.engine.hf.fast = args.engine == "fast"
    if args.engine == "fast":
        cfg.engine.hf.max_seq_len = args.max_total
    cfg.engine.max_batch_size = cfg.rollout.concurrency = mode["concurrency"]
    cfg.trainer.async_.max_staleness = mode["k"]
    cfg.trainer.async_.producer = mode["producer"]
    data = to_dict(cfg)
    extra = [f"engine.hf.tuning.{k}={v}" for k, v in engine_extra(args.engine_extra).items()]
    ours = ("python.", "bench.")  # the benchmark's own settings, not config keys
    for item in extra + [o for o in mode["overrides"] if not o.startswith(ours)]:
        apply_override(data, item)
    set_engine_levers(mode, cfg.trainer.async_.producer)
    return from_dict(TrainConfig, data, src="benchmark mode")


def set_engine_levers(mode: dict[str, Any], producer: str) -> None:
    """The mode's `bench.lever.NAME=V` items (the hf engines' code-level levers, kept for
    comparison: `own_stream`, `prefill_graphs`), set on the engine this process builds."""
    import yaml

    from agentrl import engines

    levers = {
        o.split("=", 1)[0].removeprefix("bench.lever."): yaml.safe_load(o.split("=", 1)[1])
        for o in mode["overrides"]
        if o.startswith("bench.lever.")
    }
    build = engines.BUILDERS.setdefault("_hf", engines.BUILDERS["hf"])
    if not levers:
        engines.BUILDERS["hf"] = build
        return
    if producer == "process":
        raise SystemExit("bench.lever.*: a rollout process builds its own engine; use thread")

    def with_levers(cfg: Any, model: Any, tokenizer: Any) -> Any:
        from agentrl.engines.build import _hf_kwargs, _load

        fast = cfg.hf.fast is not False
        return engines.make_hf_engine(
            _load(model), tokenizer, fast=fast, tuning=cfg.hf.tuning,
            **({"max_seq_len": cfg.hf.max_seq_len} if fast else {}), **_hf_kwargs(cfg), **levers,
        )  # fmt: skip

    engines.BUILDERS["hf"] = with_levers


def switch_interval(mode: dict[str, Any]) -> float | None:
    """The mode's `python.switchinterval=S`, if any."""
    for item in mode["overrides"]:
        if item.startswith("python.switchinterval="):
            return float(item.split("=", 1)[1])
    return None


def run_staleness_sweep(args: Any, ckpt: Path, work: Path) -> dict[str, Any]:
    """SFT once (in-process components), then each mode from the SFT'd weights."""
    from gpu_grpo import sync, train_config

    from agentrl.assembly import build_collector, build_components

    batch = args.prompts * args.n
    modes = [parse_mode(m, batch) for m in args.max_staleness]
    t0 = time.perf_counter()
    cfg = configure(train_config(ckpt, args, work / "sft_run"), args, parse_mode("0", batch))
    keys = ("shape", "vocab", "sft_steps", "max_total", "max_turns", "prompts", "n", "device")
    sft, stamp = work / "sft", json.dumps({k: str(getattr(args, k)) for k in keys})
    if args.sft_cache is not None:  # a warm device host's earlier call SFT'd these weights
        sft = args.sft_cache
    if not (sft / "stamp.json").exists() or (sft / "stamp.json").read_text() != stamp:
        from agentrl.trainer import Trainer

        comps = build_components(cfg)
        trainer = Trainer(cfg, comps, build_collector(cfg, comps))
        trainer.bootstrap_sft()
        comps.actor.model.save_pretrained(sft)
        comps.tokenizer.save_pretrained(sft)
        (sft / "stamp.json").write_text(stamp)
        trainer.finish()
        del trainer, comps
        release()
    out: dict[str, Any] = {"sft_s": time.perf_counter() - t0, "env": cfg.data.env}
    out["tool_latency_s"] = list(args.tool_latency)
    runs: dict[str, Any] = {}
    for i, mode in enumerate(modes):
        if any(m["name"] == mode["name"] for m in modes[:i]):  # a repeat: its own entry
            mode["name"] = f"{mode['name']}#{i}"
        t1 = time.perf_counter()
        try:
            runs[mode["name"]] = one_k(args, sft, work / f"m{len(runs)}", mode, sync)
        except Exception as e:  # noqa: BLE001 - keep the other modes' numbers
            runs[mode["name"]] = {"error": f"{type(e).__name__}: {e}"}
        runs[mode["name"]]["mode_wall_s"] = time.perf_counter() - t1
        print(f"mode {mode['name']}: {runs[mode['name']]}"[:1500], flush=True)
        if args.json is not None:  # so far, in case a later mode runs past the call's limit
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"partial": True, **out, "runs": runs}, default=str))
        release()
    out["runs"] = runs
    tok_s = {k: r["e2e_sampled_tok_s"] for k, r in runs.items() if "e2e_sampled_tok_s" in r}
    sync_runs = [tok_s[k] for k, r in runs.items() if r.get("k") == 0 and k in tok_s]
    # The first mode of a process pays one-time costs in its timed steps (session 9: a
    # ~1.2 s stall in one step of the first synchronous run, twice), so a sweep that starts
    # with a synchronous burn-in also reports against the synchronous runs after it.
    first = modes[0]["name"] if modes else None
    later = [tok_s[k] for k, r in runs.items() if r.get("k") == 0 and k in tok_s and k != first]
    baselines = {  # name: (baseline runs, fewest runs for the ratio to be reported)
        "first": ([tok_s[first]] if first in tok_s else [], 1),
        # The synchronous loop run more than once (spread out between the other modes):
        # each mode against the mean of those runs, and the baselines' own spread.
        "sync_mean": (sync_runs, 2),
        "sync_after_first_mode": (later, 1),
    }
    for name, (base, fewest) in baselines.items():
        if len(base) >= fewest:
            mean = sum(base) / len(base)
            out[f"ratio_e2e_vs_{name}"] = {k: v / mean for k, v in tok_s.items()}
    if len(sync_runs) > 1:
        out["sync_tok_s"] = sync_runs
    if later:
        out["sync_tok_s_after_first_mode"] = later
    return out


def one_k(args: Any, sft: Path, out_dir: Path, mode: dict[str, Any], sync: Any) -> dict[str, Any]:
    from gpu_grpo import dynamo_counters, train_config
    from torch._dynamo.utils import counters

    from agentrl.assembly import build_collector, build_components
    from agentrl.trainer import Trainer

    cfg = configure(train_config(sft, args, out_dir), args, mode)
    cfg.sft.steps = 0
    cfg.trainer.steps = args.steps + args.warmup + 1 + int(args.trace_dir is not None)
    counters.clear()  # this mode's compiles only (a thread-producer race shows as recompiles)
    comps = build_components(cfg)
    trainer = Trainer(cfg, comps, build_collector(cfg, comps))
    captured: list[Any] = []
    make_batch = comps.scorer.batch
    comps.scorer.batch = lambda groups: captured.append(make_batch(groups)) or captured[-1]  # type: ignore[method-assign]
    trainer.collector.start(0)  # as `Trainer.run` does before its first step
    interval, default_interval = switch_interval(mode), sys.getswitchinterval()
    if interval is not None:
        sys.setswitchinterval(interval)
    try:
        for _ in range(args.warmup):  # graphs, allocator; with K >= 1 it fills the pipeline
            trainer.step += 1
            trainer.train_step()
            trainer.gc.after_step(trainer.step)  # as `Trainer.run`: trainer.gc_every
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        steps, sampled = [], 0.0
        engine = getattr(comps.rollout, "engine", None)  # None: the rollout child's
        before = dict(engine.stats) if engine is not None else {}
        sync(args.device)
        frames_before = sum(counters["frames"].values())
        sample = args.stack_sample or "bench.stack_sample" in mode["overrides"]
        stacks = StackSampler() if sample else contextlib.nullcontext()
        with DeviceSampler() as dev, GilProbe() as gil, GcPauses() as gcp, stacks:
            host, threads = host_counters(), thread_cpu_ms()
            t = time.perf_counter()
            for _ in range(args.steps):
                trainer.step += 1
                m = trainer.train_step()
                if (gc_s := trainer.gc.after_step(trainer.step)) is not None:
                    m["time/gc"] = gc_s  # in the wall, as in a run
                m["sampled_tokens"] = float(captured[-1].response_mask.sum())
                sampled += m["sampled_tokens"]
                steps.append(m)
            sync(args.device)
            wall = time.perf_counter() - t
            # This process's threads on the CPU and waiting for one (another tenant's load
            # shows as run-queue wait), and the machine's steal time, over the timed steps.
            host = {f"host_{k}": v - host[k] for k, v in host_counters().items() if k in host}
            host["host_threads_cpu_ms"] = top_threads(threads, thread_cpu_ms(), 10)
        keys = ("rollout", "logprobs", "update", "weight_sync")
        after = dict(engine.stats) if engine is not None else {}
        trace = trace_one_step(trainer, args, mode) if args.trace_dir is not None else {}
        eng = {k: after[k] - before.get(k, 0) for k in after}
        if eng.get("decode_steps"):  # the worker's busy time less its prefill, per step
            decode_s = eng.get("busy_s", 0) - eng.get("prefill_s", 0)
            eng["decode_ms_per_step"] = 1e3 * decode_s / eng["decode_steps"]
        dynamo = dynamo_counters()
        dynamo["frames_in_timed_steps"] = sum(counters["frames"].values()) - frames_before
        return {
            "dynamo": dynamo,
            "trace": trace,
            "engine_stats": eng,
            **mode,
            "e2e_sampled_tok_s": sampled / wall,
            "wall_s": wall,
            "sampled_tokens": sampled,
            "step_s": [sum(s[f"time/{p}"] for p in keys) for s in steps],
            "phase_s_per_step": {p: sum(s[f"time/{p}"] for s in steps) / len(steps) for p in keys},
            # A step's time outside those phases (batch building, advantages, metrics): host
            # work on the trainer's thread, which competes for the interpreter when pipelined.
            "unphased_s_per_step": (wall - sum(s[f"time/{p}"] for s in steps for p in keys))
            / len(steps),
            "trainer_peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30
            if args.device == "cuda"
            else None,
            **dev.result(),
            **gil.result(),
            **gcp.result(),
            **host,
            "stacks": stacks.result() if isinstance(stacks, StackSampler) else {},
            "staleness": {
                key: [s.get(key) for s in steps]
                for key in (
                    "async/staleness_mean",
                    "async/staleness_max",
                    "async/off_policy_token_share",
                    "async/is_ratio_std",
                    "async/stale/dropped_groups",
                )
            },
            "reward_mean": [s["reward/mean"] for s in steps],
            "tool_calls": [s.get("tool_calls", 0.0) for s in steps],
        }
    finally:
        sys.setswitchinterval(default_interval)
        trainer.finish()  # closes the collector first


def trace_one_step(trainer: Any, args: Any, mode: dict[str, Any]) -> dict[str, Any]:
    """One more (untimed) step under the profiler: its phases and the trace's summary
    (`diagnostics/gpu_step_trace.py`), the Chrome trace under `--trace-dir`."""
    from diagnostics.gpu_step_trace import traced

    def step() -> dict[str, Any]:
        trainer.step += 1
        return dict(trainer.train_step())

    name = "".join(c if c.isalnum() else "_" for c in mode["name"])
    m, summary = traced(step, Path(args.trace_dir) / f"step_{name}.json")
    phases = ("rollout", "logprobs", "update", "weight_sync")
    return {"phase_s": {p: m.get(f"time/{p}") for p in phases}, **summary}


def release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
