"""The Actor: the policy being trained. Computes log-probs and runs the PPO-style update.

Mini-batches are optimizer steps; micro-batches accumulate gradients inside one. Each micro
loss is weighted by its share of the mini-batch's tokens (token-mean) or sequences (seq
modes), counted over all ranks, so micro-batching and sharding never change the update.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch

from agentrl.algorithms import aggregate_loss, get_policy_loss, importance_weights, kl_penalty
from agentrl.backends import TrainingBackend
from agentrl.config import AlgorithmConfig, OptimConfig, TrainerConfig

from .batch import TrainBatch
from .logprobs import role_log_probs
from .packing import build_log_prob_fn


def loss_weight_count(mask: torch.Tensor, mode: str) -> float:
    """How much a set of rows counts in the global aggregate of `mode`."""
    if mode == "token-mean":
        return float(mask.sum())
    return float((mask.sum(-1) > 0).sum())


def single_on_policy_pass(cfg: TrainerConfig, batch_size: int) -> bool:
    """True when the update is one on-policy pass (one epoch, one mini-batch): the old
    log-probs then equal the current ones, so the trainer need not compute them first."""
    return cfg.ppo_epochs == 1 and cfg.mini_batch_size >= batch_size


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig, total_steps: int) -> tuple[Any, Any]:
    params = [p for p in model.parameters() if p.requires_grad]
    # One fused kernel per step instead of foreach's dozen passes: plain CUDA parameters only
    # (FSDP2's DTensors and CPU training keep the default implementation).
    fused = bool(params) and all(p.is_cuda and type(p.data) is torch.Tensor for p in params)
    opt = torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, fused=fused or None
    )

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.scheduler == "cosine":
            progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
            return 0.5 * (1 + torch.cos(torch.tensor(min(progress, 1.0) * torch.pi)).item())
        return 1.0

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class Actor:
    def __init__(
        self,
        model: torch.nn.Module,
        backend: TrainingBackend,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        trainer: TrainerConfig,
        temperature: float = 1.0,
    ) -> None:
        self.backend = backend
        self.log_probs = build_log_prob_fn(trainer, model, backend)  # padded or packed
        self.model = backend.prepare(model)
        if trainer.compile:
            from agentrl.models.compile import compile_decoder_layers

            compile_decoder_layers(self.model)
        self.algo, self.optim_cfg, self.cfg = algo, optim, trainer
        self.temperature = temperature
        self.loss_fn = get_policy_loss(algo.policy_loss)
        self.optimizer, self.scheduler = build_optimizer(self.model, optim, trainer.steps * 8)
        backend.offload(self.model, self.optimizer)

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        self.model.eval()
        return role_log_probs(
            self.model,
            self.backend,
            batch,
            self.cfg.logprob_micro_batch_size,
            self.temperature,
            self.log_probs,
        )

    def micro_loss(self, mb: TrainBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Policy loss (+ KL term, − entropy bonus) of one micro-batch, aggregated over it.

        Without `old_log_probs` (the trainer skips recomputing them when the update is a
        single on-policy pass) the current log-probs, detached, are the old ones: ratio 1."""
        assert mb.advantages is not None
        logp, entropy = self.log_probs(self.model, mb, self.temperature)
        mask = mb.response_mask
        old = mb.old_log_probs if mb.old_log_probs is not None else logp.detach()
        loss, metrics = self.loss_fn(
            logp, old, mb.advantages, mask, self.algo, is_weights=mb.is_weights
        )
        if mb.old_log_probs is None:  # the trainer skipped the old forward: log the mismatch
            _, tis = importance_weights(old, mb.rollout_log_probs, mask, "none", self.algo.tis_cap)
            metrics["rollout_kl"] = tis["rollout_kl"]
        ent = aggregate_loss(entropy, mask, self.algo.loss_agg_mode)
        metrics["entropy"] = float(ent.detach())
        if self.algo.entropy_coef:
            loss = loss - self.algo.entropy_coef * ent
        if self.algo.kl.coef and self.algo.kl.placement == "loss" and mb.ref_log_probs is not None:
            kl = aggregate_loss(
                kl_penalty(logp, mb.ref_log_probs, self.algo.kl.estimator),
                mask,
                self.algo.loss_agg_mode,
            )
            loss = loss + self.algo.kl.coef * kl
            metrics["kl"] = float(kl.detach())
        return loss, metrics

    def _chunks(self, rows: list[int], size: int) -> Iterator[list[int]]:
        for i in range(0, len(rows), max(1, size)):
            yield rows[i : i + size]

    def update(
        self, batch: TrainBatch, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """`ppo_epochs` passes over shuffled mini-batches; returns averaged metrics."""
        self.model.train()
        sums: dict[str, float] = defaultdict(float)
        steps = 0
        with self.backend.on_device(self.model, self.optimizer):
            for _ in range(self.cfg.ppo_epochs):
                order = torch.randperm(batch.size, generator=generator).tolist()
                for mini in self._chunks(order, self.cfg.mini_batch_size):
                    self._optimizer_step(batch, mini, sums)
                    steps += 1
        return self._reduce_metrics(sums, max(steps, 1))

    def _optimizer_step(self, batch: TrainBatch, mini: list[int], sums: dict[str, float]) -> None:
        """One mini-batch. Each micro loss is weighted by its share of the mini-batch's count
        summed over ranks, so any sharding or micro size adds up to the full-batch loss."""
        backend, mode = self.backend, self.algo.loss_agg_mode
        mine = [mini[i] for i in backend.shard(len(mini))]
        total = max(backend.global_sum(loss_weight_count(batch.response_mask[mine], mode)), 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        for micro in self._micro_plan(mine, len(mini)):
            real = 1.0 if micro else 0.0
            mb = batch.select(micro or mini[:1]).to(backend.device)
            loss, metrics = self.micro_loss(mb)
            share = real * loss_weight_count(mb.response_mask, mode) / total
            (loss * share * backend.grad_scale()).backward()
            sums["loss"] += float(loss.detach()) * share
            sums["micro_batches"] += real
            for k, v in metrics.items():
                sums[k] += v * real
        sums["grad_norm"] += backend.clip_grad_norm(self.model, self.optim_cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()

    def _micro_plan(self, mine: list[int], n_mini: int) -> list[list[int]]:
        """This rank's micro-batches, padded with empty ones (run at zero weight) up to the
        count of the largest shard: sharded ranks must run the same forward/backward passes."""
        size = max(1, self.cfg.micro_batch_size)
        largest = -(-n_mini // self.backend.data_parallel_size)
        chunks = list(self._chunks(mine, size))
        return chunks + [[] for _ in range(max(1, -(-largest // size)) - len(chunks))]

    def _reduce_metrics(self, sums: dict[str, float], steps: int) -> dict[str, float]:
        """Metrics over all ranks; keys are reduced in sorted order (one collective each)."""
        total = self.backend.global_sum
        n_micro = max(total(sums.pop("micro_batches", 0.0)), 1.0)
        loss, grad_norm = sums.pop("loss", 0.0), sums.pop("grad_norm", 0.0)
        out = {k: total(sums[k]) / n_micro for k in sorted(sums)}
        out["grad_norm"] = grad_norm / steps  # clip_grad_norm returns the global norm
        out["loss"] = total(loss) / steps  # shares sum to 1 per optimizer step
        out["lr"] = float(self.scheduler.get_last_lr()[0])
        return out

    def sft(
        self, demos: list[Any], cfg: Any, pad_id: int, seed: int, log: Any = None
    ) -> list[float]:
        """Supervised bootstrap on demonstrations (see `sft.sft_train`); returns the losses.
        `log(step, loss)` is called after each step (progress)."""
        from .sft import sft_train

        with self.backend.on_device(self.model):
            return sft_train(self.model, demos, cfg, pad_id, self.backend.device, seed, log)

    def state(self) -> dict[str, Any]:
        """Model, optimizer and scheduler state a single process can load (collective)."""
        return {
            "model": dict(self.backend.full_state_dict(self.model)),
            "optimizer": self.backend.optimizer_state_dict(self.model, self.optimizer),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.backend.load_full_state_dict(self.model, state["model"])
        self.backend.load_optimizer_state_dict(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full weights for the rollout engine (LoRA adapters merged)."""
        model = self.model
        if hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter"):
            yield from _merged_lora_weights(model)
            return
        yield from self.backend.full_state_dict(model)


def _merged_lora_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Plain HF names, adapters folded in out of place (an in-place merge/unmerge round trip
    would drift the frozen base weights at every sync; see agentrl.models.lora)."""
    from agentrl.models.lora import merged_weights

    yield from merged_weights(model)
