"""`gpu_grpo.py --max-staleness 0 1 2`: the synchronous loop vs pipelined steps, one process.

Why it exists: issue #21's measurement. The multi-turn tool workload (`math/calc-v0`, up to 3
turns) gets a simulated tool latency (`--tool-latency LO HI`, uniform, seeded per task and
turn so every K sees the same latencies); each K builds fresh components from the same SFT'd
checkpoint, runs one warm-up step, then `--steps` timed steps through the real
`Trainer.train_step` with the pipeline of `trainer.async.max_staleness: K` started as
`Trainer.train` starts it. Reported per K: end-to-end sampled tok/s (trained tokens / wall of
the timed steps) and its ratio to K = 0, the GPU busy share over `--profile-steps` further
steps (kernel time / wall, torch.profiler; the engine's and the trainer's kernels both count),
peak memory, and the staleness metrics the steps logged.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from pathlib import Path
from typing import Any

import torch

ENV_ID = "bench/calc-tool-latency-v0"


def register_latency_env(lo: float, hi: float) -> str:
    """`math/calc-v0` whose tool calls take `uniform(lo, hi)` seconds (asyncio sleep: other
    episodes keep the engine busy meanwhile), seeded by the task and turn."""
    from agentrl.envs import register
    from agentrl.envs.math.calc import CalcEnv

    class SlowToolCalc(CalcEnv):
        _latency_rng = random.Random(0)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self._latency_rng = random.Random(seed)
            return super().reset(seed=seed, options=options)

        async def astep(self, action: Any) -> Any:
            if action.tool_calls and hi > 0:
                await asyncio.sleep(self._latency_rng.uniform(lo, hi))
            return await super().astep(action)

    register(ENV_ID, SlowToolCalc, description="calc-v0 with simulated tool latency")
    return ENV_ID


def run_staleness_sweep(args: Any, ckpt: Path, work: Path) -> dict[str, Any]:
    """SFT once (K = 0's components), then each K from the SFT'd weights."""
    from gpu_grpo import sync, train_config, use_fast_engine

    from agentrl.assembly import build_components

    if args.engine == "fast":
        use_fast_engine(args.max_total)
    env = register_latency_env(*args.tool_latency)
    t0 = time.perf_counter()
    cfg = train_config(ckpt, args, work / "sft_run")
    cfg.data.env = env
    comps = build_components(cfg)
    from agentrl.trainer import Trainer

    trainer = Trainer(cfg, comps)
    trainer.bootstrap_sft()
    comps.actor.model.save_pretrained(work / "sft")
    comps.tokenizer.save_pretrained(work / "sft")
    trainer.finish()
    del trainer, comps
    release()
    out: dict[str, Any] = {"sft_s": time.perf_counter() - t0, "env": env}
    out["tool_latency_s"] = list(args.tool_latency)
    runs: dict[str, Any] = {}
    for k in args.max_staleness:
        try:
            runs[str(k)] = one_k(args, work / "sft", work / f"k{k}", env, k, sync)
        except Exception as e:  # noqa: BLE001 - keep the other Ks' numbers
            runs[str(k)] = {"error": f"{type(e).__name__}: {e}"}
        release()
    out["runs"] = runs
    base = runs.get("0", {}).get("e2e_sampled_tok_s")
    if base:
        out["ratio_e2e_vs_k0"] = {
            k: r["e2e_sampled_tok_s"] / base for k, r in runs.items() if "e2e_sampled_tok_s" in r
        }
    return out


def one_k(args: Any, sft: Path, out_dir: Path, env: str, k: int, sync: Any) -> dict[str, Any]:
    from gpu_grpo import profile_call, train_config

    from agentrl.assembly import build_components
    from agentrl.trainer import Trainer
    from agentrl.trainer.pipeline import start_pipeline

    cfg = train_config(sft, args, out_dir)
    cfg.data.env = env
    cfg.sft.steps = 0
    cfg.trainer.async_.max_staleness = k
    cfg.trainer.steps = args.steps + args.profile_steps + 1
    comps = build_components(cfg)
    trainer = Trainer(cfg, comps)
    captured: list[Any] = []
    make_batch = comps.scorer.batch
    comps.scorer.batch = lambda groups: captured.append(make_batch(groups)) or captured[-1]  # type: ignore[method-assign]
    trainer._version_offset, trainer.pipeline = start_pipeline(comps, cfg, 0, [])
    try:
        trainer.step = 1
        trainer.train_step()  # warm-up: graphs, allocator; with K >= 1 it fills the pipeline
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        steps, sampled = [], 0.0
        sync(args.device)
        t = time.perf_counter()
        for _ in range(args.steps):
            trainer.step += 1
            m = trainer.train_step()
            m["sampled_tokens"] = float(captured[-1].response_mask.sum())
            sampled += m["sampled_tokens"]
            steps.append(m)
        sync(args.device)
        wall = time.perf_counter() - t
        res: dict[str, Any] = {
            "max_staleness": k,
            "e2e_sampled_tok_s": sampled / wall,
            "wall_s": wall,
            "sampled_tokens": sampled,
            "step_s": [s["time/rollout"] + s["time/update"] for s in steps],
            "phase_s_per_step": {
                p: sum(s[f"time/{p}"] for s in steps) / len(steps)
                for p in ("rollout", "logprobs", "update", "weight_sync")
            },
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30
            if args.device == "cuda"
            else None,
            "staleness": {
                key: [s.get(key) for s in steps]
                for key in (
                    "async/staleness_mean",
                    "async/staleness_max",
                    "async/off_policy_token_share",
                    "async/is_ratio_std",
                    "async/dropped_stale_groups",
                )
            },
            "reward_mean": [s["reward/mean"] for s in steps],
            "tool_calls": [s.get("tool_calls", 0.0) for s in steps],
        }
        if args.profile_steps:

            def more() -> dict[str, float]:
                for _ in range(args.profile_steps):
                    trainer.step += 1
                    m = trainer.train_step()
                return m

            prof = profile_call(more, args.device, top=10)
            res["gpu_busy_share"] = prof["device_busy_fraction"]
            res["profile_wall_s"] = prof["wall_s"]
            res["profile_top_device_ops"] = prof["top_device_ops"]
        return res
    finally:
        if trainer.pipeline is not None:
            trainer.pipeline.close()
        trainer.finish()


def release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
