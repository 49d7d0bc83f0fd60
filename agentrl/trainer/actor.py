"""The Actor: the policy being trained. Computes log-probs and runs the PPO-style update.

Mini-batches are optimizer steps; micro-batches accumulate gradients inside one. Each micro
loss is weighted by its share of the mini-batch's tokens (token-mean) or sequences (seq
modes), counted over all ranks, so micro-batching and sharding never change the update.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any, Literal, cast

import torch

from agentrl.algorithms import (
    ADDITIVE_AGG_MODES,
    get_policy_loss,
    importance_weights,
    kl_penalty,
    measured_kl,
    policy_agg_mode,
    ratio_moments,
)
from agentrl.algorithms.deferred import deferred_metrics, metric
from agentrl.algorithms.losses import AggMode, agg
from agentrl.algorithms.masked import masked_mean
from agentrl.algorithms.offpolicy import off_policy_loss, rollout_rejection
from agentrl.backends import TrainingBackend
from agentrl.config import AlgorithmConfig, OptimConfig, TrainerConfig

from .batch import TrainBatch
from .levers import UpdateLevers
from .logprobs import role_log_probs
from .packing import build_log_prob_fn, to_device_async


def loss_weight_count(mask: torch.Tensor, mode: str) -> float:
    """How much a set of rows counts in the global aggregate of `mode`: trained tokens for
    token-mean, sequences with a trained token for the seq-mean modes (token-sum needs no
    count, see `micro_share`)."""
    if mode == "token-mean":
        return float(mask.sum())
    return float((mask.sum(-1) > 0).sum())


def micro_share(mask: torch.Tensor, mode: str, total: float) -> float:
    """The weight of a micro-batch's `mode`-aggregated loss in the mini-batch's: its share of
    the global count (tokens for token-mean, sequences for the seq-mean modes), or 1 for the
    additive token-sum."""
    if mode in ADDITIVE_AGG_MODES:
        return 1.0
    return loss_weight_count(mask, mode) / total


def single_on_policy_pass(cfg: TrainerConfig, batch_size: int) -> bool:
    """True when the update is one on-policy pass (one epoch, one mini-batch): the old
    log-probs then equal the current ones, so the trainer need not compute them first."""
    return cfg.ppo_epochs == 1 and cfg.mini_batch_size >= batch_size


def old_forward_needed(algo: AlgorithmConfig, cfg: TrainerConfig, batch_size: int) -> bool:
    """Whether the update itself needs π_old from a separate forward before it starts (other
    consumers, a KL reward or a rollout dump, are the trainer's to add): TIS weights and
    rejection masks are computed from it; `off_policy: bypass` anchors on the engine's
    log-probs instead; and a single on-policy pass uses its own detached log-probs
    (`trainer.reuse_on_policy_log_probs`), exact for the decoupled loss's proximal too."""
    if algo.tis_mode != "none" or algo.rollout_mask != "none":
        return True
    if algo.off_policy == "bypass":
        return False
    return not (cfg.reuse_on_policy_log_probs and single_on_policy_pass(cfg, batch_size))


def optimizer_steps(cfg: TrainerConfig, rows_per_step: int, epochs: int) -> int:
    """Optimizer steps of the whole run: `epochs` passes over `rows_per_step` rows in
    mini-batches of `trainer.mini_batch_size`, every one of `trainer.steps`. The LR schedule's
    horizon; a step with fewer rows (DAPO filtering) takes fewer, so the schedule ends later."""
    per_pass = -(-max(rows_per_step, 1) // max(cfg.mini_batch_size, 1))
    return max(1, cfg.steps * max(epochs, 1) * per_pass)


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig, total_steps: int) -> tuple[Any, Any]:
    """AdamW and its LR schedule: linear warmup over `optim.warmup_steps`, then constant or
    (`optim.scheduler: cosine`) a half cosine reaching 0 at optimizer step `total_steps`."""
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


def apply_optim_config(optimizer: Any, scheduler: Any, cfg: OptimConfig) -> None:
    """After a checkpoint's optimizer and scheduler state are loaded (`--resume`): run with
    the config's lr, betas and weight decay, as verl does, not the ones saved in the param
    groups; Adam's moments and the schedule's position stay the checkpoint's. The schedule's
    shape (warmup, cosine, horizon) is already the config's: its factor is not saved."""
    lrs = [cfg.lr * factor(scheduler.last_epoch) for factor in scheduler.lr_lambdas]
    for group, lr in zip(optimizer.param_groups, lrs, strict=True):
        group.update(lr=lr, initial_lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    scheduler.base_lrs = [cfg.lr] * len(lrs)
    scheduler._last_lr = lrs  # what get_last_lr() reports until the next step


class Actor:
    def __init__(
        self,
        model: torch.nn.Module,
        backend: TrainingBackend,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        trainer: TrainerConfig,
        temperature: float = 1.0,
        total_steps: int | None = None,
        levers: UpdateLevers | None = None,
    ) -> None:
        """`total_steps`: optimizer steps of the run, the LR schedule's horizon (the assembly
        passes `optimizer_steps(...)`); default one per `trainer.steps`. `levers`: opt-in
        ways to run the update faster (`levers.UpdateLevers`; default all off)."""
        self.backend = backend
        self.levers = levers or UpdateLevers()
        self.log_probs = build_log_prob_fn(trainer, model, backend, self.levers)
        self.model = backend.prepare(model)
        if trainer.compile:
            from agentrl.models.compile import compile_model

            compile_model(self.model, self.levers.compile_scope)
        self.algo, self.optim_cfg, self.cfg = algo, optim, trainer
        self.temperature = temperature
        self.loss_fn = get_policy_loss(algo.policy_loss)
        # Loss metrics stay on the device until the update ends (one host sync, see
        # `algorithms.deferred`); False reads them after every micro-batch (the old way,
        # kept for benchmarks that measure what the deferral saves).
        self.defer_metrics = True
        horizon = total_steps if total_steps is not None else trainer.steps
        self.optimizer, self.scheduler = build_optimizer(self.model, optim, horizon)
        backend.offload(self.model, self.optimizer)

    def set_update_path(self, path: Literal["fused", "materialized"]) -> None:
        """Switch `trainer.update_path` on the live model (benchmarks time both paths on the
        same weights and batch); the values do not change, only how they are computed."""
        if path not in ("fused", "materialized"):
            raise ValueError(f"update_path: {path!r} is not one of 'fused', 'materialized'")
        self.cfg = replace(self.cfg, update_path=path)
        self.log_probs = build_log_prob_fn(self.cfg, self.model, self.backend, self.levers)

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

    def compute_sum_pi_squared(self, batch: TrainBatch) -> torch.Tensor:
        """Σ_v π(v)² per response position under the current policy (optimal token baseline):
        one extra no-grad padded forward over the batch."""
        from .logprobs import batched_sum_pi_squared

        if self.cfg.ulysses_sp > 1:
            raise ValueError(
                "adv_estimator optimal_token_baseline computes Σπ² with a padded forward; "
                "it does not run under trainer.ulysses_sp > 1"
            )
        self.model.eval()
        with self.backend.on_device(self.model):
            return batched_sum_pi_squared(
                self.model,
                batch.to(self.backend.device),
                self.cfg.logprob_micro_batch_size,
                self.temperature,
            )

    def micro_loss(
        self, mb: TrainBatch, algo: AlgorithmConfig | None = None, host: TrainBatch | None = None
    ) -> tuple[list[tuple[torch.Tensor, AggMode]], dict[str, Any]]:
        """The micro-batch's loss terms, each aggregated over it with its own mode: the policy
        loss (with `policy_agg_mode`), − entropy bonus and + KL term (with `loss_agg_mode`).

        `algo` is the update's resolved config (KL coefficient, divisor); default the actor's.
        `host`: the same rows on the host, packed there under `UpdateLevers.host_pack`.
        Without `old_log_probs` (the trainer skips recomputing them when the update is a
        single on-policy pass) the current log-probs, detached, are the old ones: ratio 1."""
        assert mb.advantages is not None
        algo = algo or self.algo
        src = host if host is not None and self.levers.host_pack else mb
        logp, entropy = self.log_probs(self.model, src, self.temperature)
        mask = mb.response_mask
        loss, metrics = off_policy_loss(
            self.loss_fn, logp, mb.old_log_probs, mb.rollout_log_probs, mb.advantages, mask,
            algo, is_weights=mb.is_weights,
        )  # fmt: skip
        terms = [(loss, policy_agg_mode(algo))]
        if mb.old_log_probs is None:  # the trainer skipped the old forward: log the mismatch
            cur = logp.detach()
            _, tis = importance_weights(cur, mb.rollout_log_probs, mask, "none", algo.tis_cap)
            metrics["rollout_kl"] = tis["rollout_kl"]
            metrics["rollout_logp_absdiff"] = tis["rollout_logp_absdiff"]
            metrics |= ratio_moments(cur, mb.rollout_log_probs, mask)
        metrics["entropy"] = metric(masked_mean(entropy.detach(), mask))  # per trained token
        if algo.entropy_coef:
            terms.append((-algo.entropy_coef * agg(entropy, mask, algo), algo.loss_agg_mode))
        if algo.kl.coef and algo.kl.placement == "loss" and mb.ref_log_probs is not None:
            per_token = kl_penalty(logp, mb.ref_log_probs, algo.kl.estimator)
            kl = agg(per_token, mask, algo)
            terms.append((algo.kl.coef * kl, algo.loss_agg_mode))
            metrics["kl"] = metric(kl)
            metrics["kl_seq_mean"] = measured_kl(per_token.detach(), mask)
        return terms, metrics

    def _chunks(self, rows: list[int], size: int) -> Iterator[list[int]]:
        for i in range(0, len(rows), max(1, size)):
            yield rows[i : i + size]

    def update(
        self,
        batch: TrainBatch,
        generator: torch.Generator | None = None,
        kl_coef: float | None = None,
    ) -> dict[str, float]:
        """`ppo_epochs` passes over shuffled mini-batches; returns averaged metrics.

        `kl_coef`: this step's KL coefficient when the trainer's controller moves it
        (`algorithm.kl.ctrl: adaptive`); default `algorithm.kl.coef`."""
        self.model.train()
        algo = self.resolved(batch, kl_coef)
        batch, rejected = self.rejection_masked(batch, algo)
        sums: dict[str, Any] = defaultdict(float)  # floats, or 0-d device tensors (deferred)
        steps = 0
        on_device = self.backend.on_device(self.model, self.optimizer)
        with on_device, deferred_metrics(self.defer_metrics):
            for _ in range(self.cfg.ppo_epochs):
                order = torch.randperm(batch.size, generator=generator).tolist()
                for mini in self._chunks(order, self.cfg.mini_batch_size):
                    self._optimizer_step(batch, mini, sums, algo)
                    steps += 1
        return self._reduce_metrics(sums, max(steps, 1)) | rejected

    @staticmethod
    def rejection_masked(
        batch: TrainBatch, algo: AlgorithmConfig
    ) -> tuple[TrainBatch, dict[str, float]]:
        """The batch with `algorithm.rollout_mask`'s rejected tokens out of `response_mask`
        (so out of every loss term and its denominator; the caller's batch is untouched),
        and the mask's metrics. Computed once over the whole batch, before any update."""
        if algo.rollout_mask == "none":
            return batch, {}
        if batch.old_log_probs is None:
            raise ValueError(
                f"algorithm.rollout_mask: {algo.rollout_mask} needs the old log-probs "
                "(the trainer computes them when the mask is on: `old_forward_needed`)"
            )
        keep, metrics = rollout_rejection(
            batch.old_log_probs, batch.rollout_log_probs, batch.response_mask,
            algo.rollout_mask, algo.rollout_mask_low, algo.rollout_mask_high,
        )  # fmt: skip
        mask = batch.response_mask * keep.to(batch.response_mask.dtype)
        return replace(batch, response_mask=mask), {k: float(v) for k, v in metrics.items()}

    def resolved(self, batch: TrainBatch, kl_coef: float | None) -> AlgorithmConfig:
        """The config one update runs with: the step's KL coefficient, and a fixed divisor for
        seq-mean-token-sum-norm (`loss_scale_factor`, else the batch's response width, so
        trimmed micro-batches all divide by the same number)."""
        algo = self.algo
        if kl_coef is not None:
            algo = replace(algo, kl=replace(algo.kl, coef=float(kl_coef)))
        if algo.loss_scale_factor <= 0:
            algo = replace(algo, loss_scale_factor=max(int(batch.response_mask.shape[-1]), 1))
        return algo

    def _optimizer_step(
        self, batch: TrainBatch, mini: list[int], sums: dict[str, Any], algo: AlgorithmConfig
    ) -> None:
        """One mini-batch. Each micro loss term is weighted by its share of the mini-batch's
        count (for its aggregation mode) summed over ranks, so any sharding or micro size adds
        up to the full-batch loss."""
        backend = self.backend
        mine = [mini[i] for i in backend.shard(len(mini))]
        modes = sorted({policy_agg_mode(algo), algo.loss_agg_mode})  # same order on all ranks
        totals = {
            m: max(backend.global_sum(loss_weight_count(batch.response_mask[mine], m)), 1.0)
            for m in modes
        }
        self.optimizer.zero_grad(set_to_none=True)
        for micro in self._micro_plan(mine, len(mini)):
            real = 1.0 if micro else 0.0
            rows = batch.select(micro or mini[:1])
            # Shares from the host copy: counting on the device would wait for it.
            share = {m: real * micro_share(rows.response_mask, m, totals[m]) for m in modes}
            mb = self._to_device(rows)
            terms, metrics = self.micro_loss(mb, algo, host=rows)
            # A tensor: `terms` always holds the policy loss (sum's typed result adds `0`).
            loss = cast(torch.Tensor, sum(t * share[m] for t, m in terms))
            (loss * backend.grad_scale()).backward()
            sums["loss"] += metric(loss)
            sums["micro_batches"] += real
            for k, v in metrics.items():
                sums[k] += v * real
        sums["grad_norm"] += backend.clip_grad_norm(self.model, self.optim_cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        # Gradients go now, while the device runs the step just queued (freeing them was
        # ~1 ms of host time before the next forward), and are not held between updates.
        self.optimizer.zero_grad(set_to_none=True)

    def _to_device(self, rows: TrainBatch) -> TrainBatch:
        """The micro-batch on the device; under `UpdateLevers.host_pack` from pinned memory
        without waiting (a pageable copy makes the host wait for the device each time)."""
        if not self.levers.host_pack:
            return rows.to(self.backend.device)
        device = torch.device(self.backend.device)
        moved: dict[str, Any] = {
            f.name: to_device_async(getattr(rows, f.name), device)
            for f in fields(rows)
            if isinstance(getattr(rows, f.name), torch.Tensor)
        }
        return replace(rows, **moved)

    def _micro_plan(self, mine: list[int], n_mini: int) -> list[list[int]]:
        """This rank's micro-batches, padded with empty ones (run at zero weight) up to the
        count of the largest shard: sharded ranks must run the same forward/backward passes."""
        size = max(1, self.cfg.micro_batch_size)
        largest = -(-n_mini // self.backend.data_parallel_size)
        chunks = list(self._chunks(mine, size))
        return chunks + [[] for _ in range(max(1, -(-largest // size)) - len(chunks))]

    def _reduce_metrics(self, sums: dict[str, Any], steps: int) -> dict[str, float]:
        """Metrics over all ranks; keys are reduced in sorted order (one collective each).
        Sums left on the device (deferred) are read in one transfer."""
        on_device = [k for k, v in sums.items() if isinstance(v, torch.Tensor)]
        if on_device:
            values = torch.stack([sums[k].float().reshape(()) for k in on_device]).tolist()
            sums.update(zip(on_device, values, strict=True))
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
        apply_optim_config(self.optimizer, self.scheduler, self.optim_cfg)

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
