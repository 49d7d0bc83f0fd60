"""Build every role from a `TrainConfig`. Which roles exist follows from the algorithm:
a Critic only for estimators that need values, a Reference only when a KL coefficient is set."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.backends import TrainingBackend, build_backend
from agentrl.config import TrainConfig

from .actor import Actor
from .data import TaskSource
from .roles import Critic, Reference, RewardScorer
from .rollout_role import Rollout

VALUE_ESTIMATORS = {"gae"}


@dataclass
class Components:
    backend: TrainingBackend
    tokenizer: Any
    actor: Actor
    reference: Reference | None
    critic: Critic | None
    rollout: Rollout
    scorer: RewardScorer
    data: TaskSource
    success_at: float

    def close(self) -> None:
        self.rollout.close()
        self.backend.close()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_factory(cfg: TrainConfig) -> Any:
    from agentrl.envs import make

    return lambda: make(cfg.data.env, **cfg.data.env_kwargs)


def build_engine_for(cfg: TrainConfig, policy: torch.nn.Module, tokenizer: Any, device: torch.device) -> Any:
    """The rollout engine gets its own copy of the weights; `sync_weights` refreshes it."""
    from agentrl.engines import build_engine

    engine_model = copy.deepcopy(_base_model(policy)).to(device).eval()
    for p in engine_model.parameters():
        p.requires_grad_(False)
    return build_engine(cfg.engine, engine_model, tokenizer)


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain HF model under a peft wrapper (adapters merged when syncing)."""
    if hasattr(model, "merge_and_unload"):
        merged = copy.deepcopy(model).merge_and_unload()
        return merged
    return model


def build_components(cfg: TrainConfig) -> Components:
    from agentrl.chat import ChatFormat
    from agentrl.models.load import load_model, load_tokenizer

    seed_everything(cfg.trainer.seed)
    backend = build_backend(cfg.trainer.backend, cfg.trainer.device)
    tokenizer = load_tokenizer(cfg.model)
    policy = load_model(cfg.model)
    temperature = cfg.sampling.temperature or 1.0
    engine = build_engine_for(cfg, policy, tokenizer, backend.device)
    actor = Actor(policy, backend, cfg.algorithm, cfg.optim, cfg.trainer, temperature)
    reference = None
    if cfg.algorithm.kl.coef:
        reference = Reference(load_model(cfg.model, trainable=False), backend, cfg.trainer, temperature)
    critic = None
    if cfg.algorithm.adv_estimator in VALUE_ESTIMATORS:
        critic = Critic(load_model(cfg.model, trainable=False), backend, cfg.algorithm, cfg.optim, cfg.trainer)
        for p in critic.model.parameters():
            p.requires_grad_(True)
    make_env = env_factory(cfg)
    probe = make_env()
    success_at = float(probe.reward_range[1])
    probe.close()
    chat = ChatFormat(tokenizer, cfg.rollout.tool_format)
    rollout = Rollout(engine, chat, make_env, cfg.rollout, cfg.sampling)
    scorer = RewardScorer(cfg.algorithm, cfg.rollout, tokenizer.pad_token_id)
    data = TaskSource(cfg.data, cfg.trainer.seed)
    return Components(backend, tokenizer, actor, reference, critic, rollout, scorer, data, success_at)
