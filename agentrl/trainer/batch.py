"""From trajectories to tensors, without re-tokenizing anything.

`TrainBatch` holds right-padded full sequences (prompt + response) for the forward pass and
response-aligned `[B, T]` tensors for everything the losses need. Column `j` of a response
tensor is response token `j`; its logit sits at sequence position `prompt_len - 1 + j`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from agentrl.types import Trajectory, TrajectoryGroup


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, L]
    logit_index: torch.Tensor  # [B, T] position whose logits predict response token j
    responses: torch.Tensor  # [B, T] response token ids (pad 0)
    response_mask: torch.Tensor  # [B, T] 1 on sampled (trained) tokens
    rollout_log_probs: torch.Tensor  # [B, T] engine logprobs of sampled tokens
    token_rewards: torch.Tensor  # [B, T] reward on the last sampled token of each turn
    turn_index: torch.Tensor  # [B, T] turn id of each sampled token, -1 elsewhere
    group_index: torch.Tensor  # [B]
    rewards: torch.Tensor  # [B] final episode reward (after shaping)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None
    multimodal: list[dict[str, Any]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, idx: torch.Tensor | list[int]) -> TrainBatch:
        """Rows `idx` of every tensor (mini/micro-batches), trimmed to their own lengths."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                out[f.name] = v[idx]
            elif f.name == "multimodal" and v:
                out[f.name] = [v[i] for i in idx.tolist()]
            else:
                out[f.name] = v
        sub = replace(self, **out)
        return sub.trimmed()

    def trimmed(self) -> TrainBatch:
        """Drop all-padding columns so micro-batches of short episodes stay cheap."""
        seq_len = int(self.attention_mask.sum(1).max())
        resp_len = int((self.logit_index >= 0).sum(1).max()) if self.size else 0
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor) and v.dim() == 2:
                width = seq_len if f.name in ("input_ids", "attention_mask") else resp_len
                out[f.name] = v[:, :width]
        return replace(self, **out)

    def to(self, device: torch.device | str) -> TrainBatch:
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )


def _turn_tensors(t: Trajectory, width: int) -> tuple[list[float], list[int]]:
    """Per-token reward (on each turn's last sampled token) and turn ids for one trajectory."""
    rewards = [0.0] * width
    turn_ids = [-1] * width
    for k, turn in enumerate(t.turns):
        for j in range(turn.start, turn.end):
            turn_ids[j] = k
        if turn.end > turn.start:
            rewards[turn.end - 1] += turn.reward
    return rewards, turn_ids


def _last_sampled(t: Trajectory) -> int:
    for j in range(len(t.loss_mask) - 1, -1, -1):
        if t.loss_mask[j]:
            return j
    return -1


def collate(groups: list[TrajectoryGroup], pad_id: int, reward_on: str = "episode") -> TrainBatch:
    """Stack trajectories of `groups` into a `TrainBatch`.

    `reward_on="episode"` puts the final reward on the last sampled token; `"turn"` spreads
    per-turn rewards (the final reward is added to the last turn if turns carry none).
    """
    trajs = [t for g in groups for t in g.trajectories]
    gidx = [i for i, g in enumerate(groups) for _ in g.trajectories]
    if not trajs:
        raise ValueError("collate: no trajectories")
    seq_len = max(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    resp_len = max(max(len(t.response_ids) for t in trajs), 1)
    b = len(trajs)
    input_ids = torch.full((b, seq_len), pad_id, dtype=torch.long)
    attn = torch.zeros((b, seq_len), dtype=torch.long)
    logit_index = torch.full((b, resp_len), -1, dtype=torch.long)
    responses = torch.zeros((b, resp_len), dtype=torch.long)
    mask = torch.zeros((b, resp_len))
    lps = torch.zeros((b, resp_len))
    token_rewards = torch.zeros((b, resp_len))
    turn_index = torch.full((b, resp_len), -1, dtype=torch.long)
    for i, t in enumerate(trajs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        input_ids[i, : p + r] = torch.tensor(t.input_ids, dtype=torch.long)
        attn[i, : p + r] = 1
        logit_index[i, :r] = torch.arange(p - 1, p - 1 + r)
        responses[i, :r] = torch.tensor(t.response_ids, dtype=torch.long)
        mask[i, :r] = torch.tensor(t.loss_mask, dtype=torch.float)
        lps[i, :r] = torch.tensor(t.logprobs, dtype=torch.float)
        rw, tid = _turn_tensors(t, r)
        turn_index[i, :r] = torch.tensor(tid, dtype=torch.long)
        last = _last_sampled(t)
        if reward_on == "turn" and any(rw):
            token_rewards[i, :r] = torch.tensor(rw)
        elif last >= 0:
            token_rewards[i, last] = t.reward
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attn,
        logit_index=logit_index,
        responses=responses,
        response_mask=mask,
        rollout_log_probs=lps,
        token_rewards=token_rewards,
        turn_index=turn_index,
        group_index=torch.tensor(gidx, dtype=torch.long),
        rewards=torch.tensor([t.reward for t in trajs], dtype=torch.float),
        multimodal=[t.multimodal for t in trajs] if any(t.multimodal for t in trajs) else [],
    )
