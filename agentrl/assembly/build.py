"""Build every role from a `TrainConfig`, in this process. Which roles exist follows from the
algorithm: a Critic only for estimators whose registry entry says `needs_critic`, a Reference
only when a KL coefficient is set. The local placement and both Ray workers call these, so a
role is built the same way wherever it runs."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
import time
from typing import Any

import numpy as np
import torch

from agentrl.algorithms import get_estimator
from agentrl.backends import TrainingBackend, build_backend
from agentrl.config import ConfigError, TrainConfig
from agentrl.engines.base import SamplingParams
from agentrl.rollout.role import Rollout
from agentrl.trainer.actor import Actor, optimizer_steps
from agentrl.trainer.components import Components, RolloutRole
from agentrl.trainer.data import TaskSource
from agentrl.trainer.levers import UpdateLevers
from agentrl.trainer.roles import Critic, Reference, RewardScorer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_factory(cfg: TrainConfig) -> Any:
    """Builds the run's env; imports `data.env_modules` first, in whichever process this
    runs (a Ray worker has not seen the driver's `--env-module` imports)."""
    from agentrl.envs import load_env_module, make

    for path in cfg.data.env_modules:
        load_env_module(path)
    return lambda: make(cfg.data.env, **cfg.data.env_kwargs)


def build_engine_for(
    cfg: TrainConfig,
    policy: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    *,
    copy_weights: bool = True,
) -> Any:
    """The rollout engine gets its own copy of the weights (`copy_weights`, unless `policy`
    is already a model of its own); `sync_weights` refreshes it."""
    from agentrl.engines import build_engine

    engine_model = _base_model(policy)  # a peft policy is already copied while merging
    if engine_model is policy and copy_weights:
        engine_model = copy.deepcopy(policy)
    engine_model = engine_model.to(device).eval()
    for p in engine_model.parameters():
        p.requires_grad_(False)
    engine_cfg = cfg.engine
    pipelined = cfg.trainer.async_.max_staleness >= 1
    if engine_cfg.kind == "hf" and engine_cfg.hf.keep_kv_on_update is None and pipelined:
        # null resolves here: a pipelined run keeps parked sessions' KV across its in-flight
        # updates (running rows keep theirs anyway); the synchronous loop never has a session
        # spanning an update, so it keeps the engine's default (false).
        hf = dataclasses.replace(engine_cfg.hf, keep_kv_on_update=True)
        engine_cfg = dataclasses.replace(engine_cfg, hf=hf)
    vision = cfg.model.enable_vision
    engine = build_engine(
        engine_cfg, engine_model, tokenizer, vision=vision, sampling=expected_sampling(cfg)
    )
    if (
        pipelined
        and cfg.trainer.compile
        and cfg.trainer.placement == "local"  # with Ray the update runs in another process
        and cfg.trainer.async_.producer == "thread"
        and engine.calls_transformers_modules
    ):
        with contextlib.suppress(Exception):
            asyncio.run(engine.close())
        raise ConfigError(
            f"trainer.compile with trainer.async.producer: thread and {type(engine).__name__}: "
            "the engine thread's transformers module forwards race with the compiled update "
            "(their `kernels` hub-layer flag is process-global while compiled code runs). Use "
            "engine.hf.fast: true (its own forward), trainer.async.producer: process, or "
            "trainer.compile: false"
        )
    return engine


def expected_sampling(cfg: TrainConfig) -> list[SamplingParams]:
    """How the run samples, for the engine's precapture: the training settings, plus greedy
    when a held-out eval runs (alone in the synchronous loop, so its batches are all greedy)."""
    s = cfg.sampling
    out = [SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)]
    if cfg.data.eval_episodes > 0:
        out.append(SamplingParams(temperature=0.0))
    return out


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain HF model under a peft wrapper (adapters merged when syncing)."""
    if hasattr(model, "merge_and_unload"):
        peft_model: Any = copy.deepcopy(model)  # a peft PeftModel
        merged: torch.nn.Module = peft_model.merge_and_unload()
        return merged
    return model


def _chat(cfg: TrainConfig, tokenizer: Any) -> Any:
    from agentrl.chat import ChatFormat
    from agentrl.models.load import load_vision_processor

    vision = load_vision_processor(cfg.model, tokenizer)
    return ChatFormat(tokenizer, cfg.rollout.tool_format, vision=vision)


def _local_rollout(cfg: TrainConfig, engine: Any, tokenizer: Any, make_env: Any) -> Rollout:
    sleeps = cfg.engine.sleep_between_phases
    chat = _chat(cfg, tokenizer)
    return Rollout(
        engine, chat, make_env, cfg.rollout, cfg.sampling, seed=cfg.trainer.seed, sleeps=sleeps
    )


def build_rollout(
    cfg: TrainConfig, policy: torch.nn.Module, tokenizer: Any, device: torch.device
) -> tuple[RolloutRole, float]:
    """The rollout role (engine + env pool) and the env's success threshold; call it before
    the policy is prepared (sharded) so the engine copies full weights. With
    `trainer.async.producer: process` the engine and envs live in a child process
    (`agentrl.workers.process_rollout`), which builds them with `rollout_in_child`."""
    make_env = env_factory(cfg)
    probe = make_env()
    success_at = float(probe.reward_range[1])
    probe.close()
    if cfg.trainer.async_.producer == "process":
        from agentrl.workers.process_rollout import ProcessRollout

        state = _base_model(policy).state_dict()
        timeout = cfg.trainer.async_.producer_timeout_s
        chat = _chat(cfg, tokenizer)
        return ProcessRollout(rollout_in_child, cfg, device, state, chat, timeout), success_at
    engine = build_engine_for(cfg, policy, tokenizer, device)
    return _local_rollout(cfg, engine, tokenizer, make_env), success_at


def rollout_in_child(
    cfg: TrainConfig, device: torch.device, staging: dict[str, torch.Tensor]
) -> Rollout:
    """The rollout child's own `Rollout` (`trainer.async.producer: process`): the model
    loaded from `cfg.model`, its weights replaced by the trainer's staging copy (so an SFT'd
    or resumed policy, or a random-init preset, is exactly the trainer's), then the engine."""
    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.trainer.threads import apply_cpu_threads

    seed_everything(cfg.trainer.seed)
    apply_cpu_threads(cfg.trainer.cpu_threads, device, log=False)
    tokenizer = load_tokenizer(cfg.model)
    model = load_model(cfg.model, trainable=False)
    with torch.no_grad():
        model.load_state_dict(staging, strict=True)
    make_env = env_factory(cfg)
    try:
        make_env().close()
    except Exception as e:
        raise ValueError(
            f"data.env {cfg.data.env!r} cannot be made in the rollout process "
            f"({type(e).__name__}: {e}); an env registered by your own script must come from "
            "a module in data.env_modules (`--env-module`): the child imports those, not "
            "your script"
        ) from e
    engine = build_engine_for(cfg, model, tokenizer, device, copy_weights=False)
    return _local_rollout(cfg, engine, tokenizer, make_env)


def build_learner(
    cfg: TrainConfig, policy: torch.nn.Module, backend: TrainingBackend
) -> tuple[Actor, Reference | None, Critic | None]:
    """The trained roles: actor, plus a reference and a critic when the algorithm needs them."""
    from agentrl.models.load import load_model

    temperature = cfg.sampling.temperature or 1.0
    # The LR schedules' horizon: every optimizer step of the run (rows per step: one group of
    # `rollout.n` per prompt of `data.batch_size`).
    rows = cfg.data.batch_size * cfg.rollout.n
    horizon = optimizer_steps(cfg.trainer, rows, cfg.trainer.ppo_epochs)
    # Packed micro-batches are packed on the host and sent without a host sync.
    levers = UpdateLevers(
        traced_attention=cfg.trainer.packing,
        host_pack=cfg.trainer.packing,
    )
    actor = Actor(
        policy,
        backend,
        cfg.algorithm,
        cfg.optim,
        cfg.trainer,
        temperature,
        total_steps=horizon,
        levers=levers,
    )
    reference = None
    if cfg.algorithm.kl.coef:
        frozen = load_model(cfg.model, trainable=False)
        reference = Reference(frozen, backend, cfg.trainer, temperature)
    critic = None
    if get_estimator(cfg.algorithm.adv_estimator).needs_critic:
        lm = load_model(cfg.model, trainable=False)
        steps = optimizer_steps(cfg.trainer, rows, epochs=1)  # one pass per step
        critic = Critic(lm, backend, cfg.algorithm, cfg.optim, cfg.trainer, total_steps=steps)
        for p in critic.model.parameters():
            p.requires_grad_(True)
    return actor, reference, critic


def build_components(cfg: TrainConfig) -> Components:
    """Every role in this process (`trainer.placement=local`, before sharding)."""
    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.trainer.threads import apply_cpu_threads

    started = time.time()
    seed_everything(cfg.trainer.seed)
    data = TaskSource(cfg.data, cfg.trainer.seed)  # first: a bad dataset row fails in seconds
    backend = build_backend(cfg.trainer.backend, cfg.trainer.device, cfg.trainer)
    apply_cpu_threads(cfg.trainer.cpu_threads, backend.device, log=backend.is_main)
    tokenizer = load_tokenizer(cfg.model)
    policy = load_model(cfg.model)
    rollout, success_at = build_rollout(cfg, policy, tokenizer, backend.device)
    actor, reference, critic = build_learner(cfg, policy, backend)
    scorer = RewardScorer(cfg.algorithm, cfg.rollout, tokenizer.pad_token_id)
    return Components(
        backend,
        tokenizer,
        actor,
        reference,
        critic,
        rollout,
        scorer,
        data,
        success_at,
        make_env=env_factory(cfg),
        started_at=started,
    )
