"""Supervised bootstrap on oracle demonstrations (`agentrl sft`, and `sft.steps` before RL).

Demos are built the way the rollout builds trajectories: prompt ids from the chat template,
each assistant turn as the template renders it (through its end-of-turn token, mask 1), then the
observation delta (mask 0). So SFT trains exactly the token sequences RL will later sample.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agentrl.chat import ChatFormat
from agentrl.config import SFTConfig
from agentrl.multimodal.rollout import EpisodeImages
from agentrl.rows import Row
from agentrl.types import Trajectory, TrajectoryGroup

from .batch import collate
from .logprobs import response_log_probs


def _through_stop(ids: list[int], stops: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in stops:
            return ids[: i + 1]
    return ids


def _reset(env: Any, task: Any) -> Any:
    """Reset on an env seed, or on a dataset row (`agentrl.rows.Row`, seed = its index)."""
    if isinstance(task, Row):
        return env.reset(seed=task.index, options={"row": task})
    return env.reset(seed=task)


def _final_oracle_action(env: Any, seed: Any) -> Any:
    """The oracle's last message of the episode on `seed` (its answer), or None."""
    _reset(env, seed)
    action = None
    for _ in range(env.max_turns + 1):
        action = env.oracle_action()
        if action is None:
            return None
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return action
    return action


def demo_trajectory(
    env: Any, chat: ChatFormat, seed: int | Row, skip_tools: bool = False
) -> Trajectory | None:
    """Roll the env's oracle policy out into a token-exact trajectory (None: no oracle).

    `seed`: an env seed or a dataset row. `skip_tools`: the teacher answers at once with the
    oracle's final message, no tool calls.
    """
    shortcut = _final_oracle_action(env, seed) if skip_tools else None
    obs, _ = _reset(env, seed)
    tools = obs.tools
    traj = Trajectory(prompt_ids=[])
    images = EpisodeImages(getattr(chat, "vision", None), traj)  # expands + records VLM images
    traj.prompt_ids, pending = images.expand(obs.messages, chat.prompt_ids(obs.messages, tools), 0)
    images.commit(pending)
    stops = set(chat.stop_token_ids)
    for _ in range(env.max_turns + 1):
        action = shortcut or env.oracle_action()
        if action is None:
            return None
        ids = _through_stop(chat.assistant_ids(action, tools), stops)
        traj.append(ids, trained=True, logprobs=[0.0] * len(ids))
        obs, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            traj.reward = float(reward)
            return traj
        delta = chat.observation_ids(obs.messages, tools, sampled_ids=ids)
        delta, pending = images.expand(obs.messages, delta, len(traj.input_ids))
        traj.append(delta, trained=False)
        images.commit(pending)
    return traj


def build_demos(
    env_factory: Callable[[], Any],
    chat: ChatFormat,
    seeds: Sequence[int | Row],
    skip_tools: float = 0.0,
) -> list[Trajectory]:
    """One oracle demo per seed or dataset row (`TaskSource.demo_items`); a `skip_tools`
    fraction of them answer without tools."""
    env = env_factory()
    rng = random.Random(len(seeds))
    try:
        demos = [demo_trajectory(env, chat, s, rng.random() < skip_tools) for s in seeds]
    finally:
        env.close()
    if any(d is None for d in demos):
        raise ValueError(
            "SFT needs an env with an oracle (oracle_action returned None); "
            "set sft.steps=0 to train with RL only"
        )
    return [d for d in demos if d is not None]


def sft_train(
    model: torch.nn.Module,
    demos: list[Trajectory],
    cfg: SFTConfig,
    pad_id: int,
    device: torch.device,
    seed: int = 0,
    log: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Cross-entropy on the demos' trained tokens; returns the loss per step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    model.train()
    losses = []
    for step in range(cfg.steps):
        idx = torch.randint(len(demos), (min(cfg.batch_size, len(demos)),), generator=gen).tolist()
        batch = collate([TrajectoryGroup("sft", [demos[i] for i in idx])], pad_id).to(device)
        logp, _ = response_log_probs(model, batch)
        mask = batch.response_mask
        loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None:
            log(step, losses[-1])
    model.eval()
    return losses
