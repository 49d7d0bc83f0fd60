"""The TRL half of `gpu_grpo.py`: `GRPOTrainer` with the same prompts, batch and lengths.

Kept apart so the agentrl half never imports TRL (it runs in its own process, see
`gpu_grpo.trl_subprocess`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from gpu_grpo import sync


def env_prompts(n: int) -> list[dict[str, str]]:
    """The first-turn prompt text of calc-v0 episodes (training seeds 0..n-1) and answers."""
    from agentrl.envs import make

    rows = []
    for seed in range(n):
        env = make("math/calc-v0")
        obs, _ = env.reset(seed=seed)
        rows.append({"messages": obs.messages, "tools": obs.tools, "answer": env.task.answer})
        env.close()
    return rows


def run_trl(args: argparse.Namespace, ckpt: Path, work: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer with matched batch/lengths; returns per-step wall and tokens."""
    import dataclasses

    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(ckpt)
    rows = env_prompts(args.prompts * (args.steps + 1))
    texts = [
        tok.apply_chat_template(
            r["messages"], tools=r["tools"], tokenize=False, add_generation_prompt=True
        )
        for r in rows
    ]
    ds = Dataset.from_dict({"prompt": texts, "answer": [r["answer"] for r in rows]})

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [float(a in c) for c, a in zip(completions, answer, strict=True)]

    batch = args.prompts * args.n
    accum = max(1, batch // args.micro)
    want = dict(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=args.micro,
        gradient_accumulation_steps=accum,
        num_generations=args.n,
        max_completion_length=args.max_new_tokens,
        max_steps=args.steps + 1,
        learning_rate=1e-6,
        beta=0.0,
        temperature=1.0,
        bf16=args.device == "cuda",
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_vllm=False,
        num_iterations=1,
        seed=0,
        dataloader_num_workers=0,
        use_cpu=args.device != "cuda",
        shuffle_dataset=False,
    )
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    config = GRPOConfig(**{k: v for k, v in want.items() if k in names})
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="sdpa")
    times: list[float] = []
    logs: list[dict[str, Any]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            sync(args.device)
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            sync(args.device)
            times.append(time.perf_counter() - self.t)
            if args.device == "cuda" and len(times) == 1:
                torch.cuda.reset_peak_memory_stats()

        def on_log(
            self, _a: Any, _s: Any, _c: Any, logs_: dict[str, Any] | None = None, **k: Any
        ) -> None:
            logs.append(dict(logs_ or k.get("logs") or {}))

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=ds,
        processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.train()
    lengths = [float(x["completions/mean_length"]) for x in logs if "completions/mean_length" in x]
    timed, lens = times[1:], lengths[1 : len(times)]
    sampled = sum(lens) * batch
    return {
        "trl_version": trl.__version__,
        "step_s": times,
        "completion_mean_length": lengths,
        "e2e_sampled_tok_s": sampled / max(sum(timed), 1e-9),
        "sampled_tokens_per_step": sampled / max(len(timed), 1),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30
        if args.device == "cuda"
        else None,
        "grpo_config": {k: v for k, v in want.items() if k in names and k != "output_dir"},
    }
