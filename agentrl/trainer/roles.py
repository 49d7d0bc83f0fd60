"""Roles besides the Actor: Reference, Critic, RewardScorer. One role per class, composed by
the Trainer; which roles exist follows from the config (a critic only for estimators whose
registry entry says `needs_critic`, a reference only when a KL coefficient is set), never from
role strings. `agentrl.assembly` builds them."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.algorithms import (
    filter_groups_by_reward_variance,
    kl_penalized_rewards,
    overlong_penalty,
    value_loss,
)
from agentrl.backends import TrainingBackend
from agentrl.config import AlgorithmConfig, OptimConfig, RolloutConfig, TrainerConfig
from agentrl.types import TrajectoryGroup

from .actor import apply_optim_config, build_optimizer
from .batch import TrainBatch, collate
from .logprobs import role_log_probs
from .packing import build_log_prob_fn

# Trajectory metadata key: the reward of the greedy rollout of the row's prompt (ReMax).
GREEDY_BASELINE = "greedy_baseline"


class Reference:
    """A frozen copy of the initial policy, for the KL term."""

    def __init__(
        self,
        model: torch.nn.Module,
        backend: TrainingBackend,
        cfg: TrainerConfig,
        temperature: float,
    ) -> None:
        self.log_probs = build_log_prob_fn(cfg, model, backend)
        self.model = backend.prepare(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.backend, self.cfg, self.temperature = backend, cfg, temperature
        backend.offload(self.model)

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        return role_log_probs(
            self.model,
            self.backend,
            batch,
            self.cfg.logprob_micro_batch_size,
            self.temperature,
            self.log_probs,
        )

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Restart from the policy's weights (after the SFT bootstrap)."""
        self.backend.load_full_state_dict(self.model, weights)


class ValueModel(torch.nn.Module):
    """A causal LM's backbone with a scalar head: V(state before response token j)."""

    def __init__(self, lm: Any) -> None:  # a transformers PreTrainedModel
        super().__init__()
        self.backbone = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
        hidden = lm.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, batch: TrainBatch) -> torch.Tensor:
        backbone: Any = self.backbone  # torch types module attributes as Tensor | Module
        out = backbone(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        )
        values = self.head(out.last_hidden_state.float()).squeeze(-1)  # [B, L]
        rows = torch.arange(batch.size, device=values.device)[:, None]
        return values[rows, batch.logit_index.clamp(min=0)] * (batch.logit_index >= 0)


class Critic:
    """Value function for GAE, trained with the clipped value loss."""

    def __init__(
        self,
        lm: torch.nn.Module,
        backend: TrainingBackend,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        cfg: TrainerConfig,
        total_steps: int | None = None,
    ) -> None:
        """`total_steps`: the critic's optimizer steps in the run (its LR schedule's horizon);
        default one per `trainer.steps`."""
        self.backend, self.algo, self.cfg = backend, algo, cfg
        self.model = backend.prepare(ValueModel(lm))
        horizon = total_steps if total_steps is not None else cfg.steps
        self.optimizer, self.scheduler = build_optimizer(self.model, optim, horizon)
        self.grad_clip, self.optim_cfg = optim.grad_clip, optim
        backend.offload(self.model, self.optimizer)

    @torch.no_grad()
    def compute_values(self, batch: TrainBatch) -> torch.Tensor:
        self.model.eval()
        out = torch.zeros(batch.responses.shape)
        with self.backend.on_device(self.model):
            for start in range(0, batch.size, self.cfg.logprob_micro_batch_size):
                stop = min(start + self.cfg.logprob_micro_batch_size, batch.size)
                idx = list(range(start, stop))
                v = self.model(batch.select(idx).to(self.backend.device)).float().cpu()
                out[idx, : v.shape[1]] = v
        return out

    def update(self, batch: TrainBatch) -> dict[str, float]:
        with self.backend.on_device(self.model, self.optimizer):
            return self._update(batch)

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        self.model.train()
        metrics: dict[str, float] = {}
        for start in range(0, batch.size, self.cfg.mini_batch_size):
            mb = batch.select(list(range(start, min(start + self.cfg.mini_batch_size, batch.size))))
            mb = mb.to(self.backend.device)
            assert mb.values is not None and mb.returns is not None
            self.optimizer.zero_grad(set_to_none=True)
            loss, metrics = value_loss(
                self.model(mb), mb.values, mb.returns, mb.response_mask, self.algo.value_clip
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            metrics["value_loss"] = float(loss.detach())
        return metrics

    def state(self) -> dict[str, Any]:
        return {
            "critic": self.model.state_dict(),
            "critic_optimizer": self.optimizer.state_dict(),
            "critic_scheduler": self.scheduler.state_dict(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if "critic" in state:
            self.model.load_state_dict(state["critic"])
            self.optimizer.load_state_dict(state["critic_optimizer"])
        if "critic_scheduler" in state:  # checkpoints from before the critic's schedule lack it
            self.scheduler.load_state_dict(state["critic_scheduler"])
        apply_optim_config(self.optimizer, self.scheduler, self.optim_cfg)


class RewardScorer:
    """Turns rollout groups into a training batch: reward shaping, DAPO filtering, KL-in-reward,
    greedy baselines (ReMax).

    Env rewards are already on the trajectories (the env is the verifier); this role applies
    what the algorithm config adds on top.
    """

    def __init__(self, algo: AlgorithmConfig, rollout: RolloutConfig, pad_id: int) -> None:
        self.algo, self.rollout, self.pad_id = algo, rollout, pad_id

    def keep_informative(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """DAPO dynamic sampling: drop groups whose rewards are all equal. A group carrying a
        greedy baseline (ReMax) counts it as one more value: samples that all tie with each
        other but not with the baseline still have non-zero advantages. Infrastructure
        failures (`Trajectory.infra_failed`) are not counted: their 0 is no score, and the
        trainer leaves them out of the batch (`agentrl.trainer.exclusion`)."""
        if not self.algo.dynamic_sampling or not groups:
            return groups
        values = [[t.reward for t in g.trajectories if not t.infra_failed] for g in groups]
        values = [v + _baseline(g) if v else v for v, g in zip(values, groups, strict=True)]
        index = torch.tensor([i for i, v in enumerate(values) for _ in v], dtype=torch.long)
        rewards = torch.tensor([r for v in values for r in v], dtype=torch.float)
        keep = filter_groups_by_reward_variance(rewards, index) if len(index) else index.bool()
        informative = set(index[keep].tolist())
        return [g for i, g in enumerate(groups) if i in informative]

    def shape(self, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """DAPO overlong shaping: penalise episodes approaching `rollout.max_total_tokens`."""
        if self.algo.overlong_buffer <= 0:
            return {}
        trajs = [t for g in groups for t in g.trajectories]
        # The episode's total length (prompt + turns + observations) against its total budget.
        lengths = torch.tensor([len(t.prompt_ids) + len(t.response_ids) for t in trajs])
        pen = overlong_penalty(
            lengths,
            self.rollout.max_total_tokens,
            self.algo.overlong_buffer,
            self.algo.overlong_penalty,
        )
        for t, p in zip(trajs, pen.tolist(), strict=True):
            t.metadata["overlong_penalty"] = p
            t.reward += p
        return {"overlong_penalty": float(pen.mean())}

    def attach_greedy_baseline(
        self, groups: list[TrajectoryGroup], greedy: list[TrajectoryGroup]
    ) -> None:
        """Stamp each group's greedy-episode reward on its rows (`metadata[GREEDY_BASELINE]`).

        `greedy[i]` is the single greedy episode of the prompt of `groups[i]` (same collect
        items, same order). Stamping the rows lets the baseline follow its group through DAPO
        filtering and refills. The greedy episode is shaped like sampled ones (`shape`): the
        baseline should score the reward being optimised. KL-in-reward is not applied to it (that
        would need reference log-probs of the greedy episode); being per prompt, the baseline
        stays unbiased either way.
        """
        if len(greedy) != len(groups):
            raise ValueError(f"greedy baseline: {len(greedy)} episodes for {len(groups)} groups")
        self.shape(greedy)
        for group, ref in zip(groups, greedy, strict=True):
            (episode,) = ref.trajectories
            for t in group.trajectories:
                if t.metadata.get("seed") != episode.metadata.get("seed"):
                    raise ValueError(
                        f"greedy baseline of {ref.group_id} paired with group {group.group_id}"
                        f" of another task (seed {episode.metadata.get('seed')} vs "
                        f"{t.metadata.get('seed')})"
                    )
                t.metadata[GREEDY_BASELINE] = episode.reward

    def baseline_rewards(self, groups: list[TrajectoryGroup]) -> torch.Tensor:
        """`[B]` greedy baseline per row, in `batch(groups)` row order."""
        trajs = [t for g in groups for t in g.trajectories]
        missing = [t for t in trajs if GREEDY_BASELINE not in t.metadata]
        if missing:
            raise ValueError(f"{len(missing)} rows have no greedy baseline (attach it first)")
        return torch.tensor([float(t.metadata[GREEDY_BASELINE]) for t in trajs])

    def batch(self, groups: list[TrajectoryGroup]) -> TrainBatch:
        return collate(groups, self.pad_id, reward_on=self.algo.credit)

    def kl_in_reward(
        self,
        batch: TrainBatch,
        log_probs: torch.Tensor | None,
        ref: torch.Tensor,
        coef: float | None = None,
    ) -> dict[str, Any]:
        """Fold −coef·KL into the rewards (`kl.placement: reward`); `coef` is this step's
        coefficient from the trainer's KL controller (default `algorithm.kl.coef`)."""
        if not (self.algo.kl.coef and self.algo.kl.placement == "reward"):
            return {}
        assert log_probs is not None  # the trainer computes them when the KL is in the reward
        batch.token_rewards, metrics = kl_penalized_rewards(
            batch.token_rewards,
            log_probs,
            ref,
            batch.response_mask,
            self.algo.kl.coef if coef is None else coef,
            self.algo.kl.estimator,
        )
        return metrics


def _baseline(group: TrajectoryGroup) -> list[float]:
    """The group's greedy-baseline reward as a one-element list, or [] without one."""
    value = group.trajectories[0].metadata.get(GREEDY_BASELINE) if group.trajectories else None
    return [] if value is None else [float(value)]
