"""The loop both self-play recipes share.

    for each iteration:
        sample with the engine (it holds the previous iterate π_prev)
        score those samples under π_prev once (no grad)         ← the frozen reference
        `epochs` passes of mini-batch updates of π_θ on the recipe's loss
        sync π_θ into the engine: it becomes the next π_prev

Scoring under π_prev once, before any update, is why no second model copy is kept: at the
start of an iteration π_θ *is* π_prev (dropout is off in these models), and π_prev's log-probs
of a fixed set of samples never change during the iteration.

Roles come from `agentrl.assembly.build_components` (actor = policy + optimizer, rollout = engine + runner,
task source, env factory), so models, LoRA, backends and engines behave as in RL training.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import torch

from agentrl.algorithms import sequence_log_probs
from agentrl.assembly import build_components
from agentrl.config import to_dict
from agentrl.rollout import Rollout
from agentrl.trainer import Actor, collate, run_dir
from agentrl.trainer.logger import MetricsLogger
from agentrl.trainer.logprobs import response_log_probs
from agentrl.types import Trajectory, TrajectoryGroup

from .config import SelfPlayTrainConfig


class SelfPlayRecipe(ABC):
    """Subclasses gather one iteration's data (`collect`) and score a mini-batch (`loss`)."""

    def __init__(self, cfg: SelfPlayTrainConfig) -> None:
        self.cfg, self.sp = cfg, cfg.selfplay
        self.c = build_components(cfg)  # in this process: the local roles themselves
        actor, rollout = self.c.actor, self.c.rollout
        if not (isinstance(actor, Actor) and isinstance(rollout, Rollout)):
            raise TypeError(f"self-play needs local roles, got {actor!r} and {rollout!r}")
        self.actor, self.rollout = actor, rollout
        self.device = self.c.backend.device
        self.pad_id = self.c.tokenizer.pad_token_id
        self.out = run_dir.expand(cfg.trainer.out_dir, cfg.data.env)
        self.logger = MetricsLogger(
            self.out,
            tensorboard=cfg.trainer.tensorboard,
            wandb=cfg.trainer.wandb,
            config=to_dict(cfg),
            enabled=self.c.backend.is_main,
        )
        self.generator = torch.Generator().manual_seed(cfg.trainer.seed)

    # ------------------------------------------------------------------ recipe hooks
    @abstractmethod
    def collect(self, items: list[Any]) -> tuple[int, dict[str, float]]:
        """Sample this iteration's data with π_prev and score it; returns (examples, metrics)."""

    @abstractmethod
    def loss(self, rows: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        """The recipe's loss (a mean over `rows`) under the current policy."""

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, float]:
        """All iterations; returns the final evaluation (empty when `eval_episodes` is 0)."""
        try:
            if self.cfg.sft.steps:
                self.bootstrap_sft()
            self.evaluate(0, "before")
            for it in range(1, self.sp.iterations + 1):
                self.iteration(it)
            result = self.evaluate(self.sp.iterations, "after")
            self.save()
        finally:
            self.logger.close()
            self.c.close()
        return result

    def iteration(self, it: int) -> dict[str, float]:
        t0 = time.perf_counter()
        n, metrics = self.collect(self.c.data.next_batch(self.sp.prompts_per_iteration))
        metrics["time/collect"] = time.perf_counter() - t0
        metrics |= self.optimize(n)
        metrics["time/weight_sync"] = self.c.rollout.sync_weights(self.actor.named_weights())
        metrics["time/iteration"] = time.perf_counter() - t0
        self.logger.log(it, metrics)
        return metrics

    def optimize(self, n: int) -> dict[str, float]:
        """`epochs` shuffled passes; mini-batches of `batch_size`, micro-batches accumulate."""
        if n == 0:
            return {}
        model, opt = self.actor.model, self.actor.optimizer
        model.train()
        sums: dict[str, float] = {}
        losses: list[float] = []
        micro = max(1, self.cfg.trainer.micro_batch_size)
        for _ in range(self.sp.epochs):
            order = torch.randperm(n, generator=self.generator).tolist()
            for start in range(0, n, self.sp.batch_size):
                mini = order[start : start + self.sp.batch_size]
                opt.zero_grad(set_to_none=True)
                step_loss = 0.0
                for k in range(0, len(mini), micro):
                    rows = mini[k : k + micro]
                    loss, metrics = self.loss(rows)
                    share = len(rows) / len(mini)
                    (loss * share).backward()
                    step_loss += float(loss.detach()) * share
                    for key, v in metrics.items():
                        sums[key] = sums.get(key, 0.0) + v * share
                self.c.backend.clip_grad_norm(model, self.cfg.optim.grad_clip)
                opt.step()
                self.actor.scheduler.step()
                losses.append(step_loss)
        model.eval()
        steps = max(len(losses), 1)
        out = {k: v / steps for k, v in sums.items()}
        out |= {"loss": sum(losses) / steps, "loss/first": losses[0], "loss/last": losses[-1]}
        return out | {"optimizer_steps": float(len(losses))}

    # ------------------------------------------------------------------ shared pieces
    def sequence_logps(self, trajs: list[Trajectory], grad: bool) -> torch.Tensor:
        """log π(y|x) of each trajectory's sampled tokens (tool/observation tokens excluded)."""
        batch = collate([TrajectoryGroup("selfplay", trajs)], self.pad_id).to(self.device)
        with torch.set_grad_enabled(grad):
            logp, _ = response_log_probs(self.actor.model, batch)
            return sequence_log_probs(logp, batch.response_mask)

    def prev_logps(self, trajs: list[Trajectory]) -> torch.Tensor:
        """Scores under π_prev: the policy before this iteration's updates, chunked, no grad."""
        self.actor.model.eval()
        size = max(1, self.cfg.trainer.logprob_micro_batch_size)
        parts = [
            self.sequence_logps(trajs[i : i + size], False) for i in range(0, len(trajs), size)
        ]
        return torch.cat(parts).detach()

    def evaluate(self, step: int, tag: str) -> dict[str, float]:
        items = self.c.data.eval_items() if self.cfg.data.eval_episodes > 0 else []
        if not items:  # eval off, or dataset rows without a validation split
            return {}
        res = self.c.rollout.evaluate(items, self.c.success_at)
        self.logger.log(step, res, file="eval.jsonl")
        self.logger.console.print(f"[bold cyan]eval ({tag})[/] success {res['success_rate']:.3f}")
        return res

    def bootstrap_sft(self) -> None:
        """SPIN/SPPO start from a supervised model: a short SFT on oracle demos first."""
        from agentrl.trainer.sft import build_demos, sft_train

        cfg = self.cfg
        items = self.c.data.demo_items(cfg.sft.demos)
        chat = self.rollout.runner.chat
        demos = build_demos(self.c.make_env, chat, items, cfg.sft.skip_tools)
        losses = sft_train(
            self.actor.model, demos, cfg.sft, self.pad_id, self.device, cfg.trainer.seed
        )
        self.logger.log(
            0, {"sft/loss_first": losses[0], "sft/loss_last": losses[-1]}, file="sft.jsonl"
        )
        self.c.rollout.sync_weights(self.actor.named_weights())

    def save(self) -> Path:
        """The final iterate as an HF checkpoint directory (usable as `model.path`)."""
        from agentrl.models.load import save_pretrained

        return save_pretrained(self.actor.model, self.c.tokenizer, self.out / "final")
