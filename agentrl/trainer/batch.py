"""From trajectories to tensors, without re-tokenizing anything.

`TrainBatch` holds right-padded full sequences (prompt + response) for the forward pass and
response-aligned `[B, T]` tensors for everything the losses need. Column `j` of a response
tensor is response token `j`; its logit sits at sequence position `prompt_len - 1 + j`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch

from agentrl.types import TrajectoryGroup


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
    # [B] episode id where one episode spans several rows (a split harness session); None
    # when every row is its own episode.
    episode_index: torch.Tensor | None = None
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


def _cat(lists: Any, dtype: Any) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(lists), dtype)


def collate(groups: list[TrajectoryGroup], pad_id: int, reward_on: str = "episode") -> TrainBatch:
    """Stack trajectories of `groups` into a `TrainBatch`.

    `reward_on="episode"` puts the final reward on the last sampled token; `"turn"` spreads
    per-turn rewards (the final reward is added to the last turn if turns carry none).

    Built in numpy and handed to torch at the end: a torch call releases and retakes the
    interpreter lock, and a pipelined run (`trainer.async`, thread producer) builds its batch
    beside the rollout's threads, where a per-row build of small tensors waited for the lock
    on each of its ~10 calls a row.
    """
    trajs = [t for g in groups for t in g.trajectories]
    gidx = [i for i, g in enumerate(groups) for _ in g.trajectories]
    if not trajs:
        raise ValueError("collate: no trajectories")
    b = len(trajs)
    p_len = np.fromiter((len(t.prompt_ids) for t in trajs), np.int64, b)
    r_len = np.fromiter((len(t.response_ids) for t in trajs), np.int64, b)
    seq_len, resp_len = int((p_len + r_len).max()), max(int(r_len.max()), 1)
    in_seq = np.arange(seq_len)[None, :] < (p_len + r_len)[:, None]  # [b, seq_len]
    cols = np.arange(resp_len)
    in_resp = cols[None, :] < r_len[:, None]  # [b, resp_len]
    for name in ("loss_mask", "logprobs"):  # the flat scatter below would shift a bad row
        lens = np.fromiter((len(getattr(t, name)) for t in trajs), np.int64, b)
        if (bad := np.flatnonzero(lens != r_len)).size:
            i = int(bad[0])
            raise ValueError(
                f"collate: trajectory {i} (group {gidx[i]}) has {lens[i]} {name} entries for "
                f"{r_len[i]} response tokens"
            )
    input_ids = np.full((b, seq_len), pad_id, np.int64)
    input_ids[in_seq] = _cat((t.input_ids for t in trajs), np.int64)
    logit_index = np.where(in_resp, p_len[:, None] - 1 + cols[None, :], -1)
    responses = np.zeros((b, resp_len), np.int64)
    responses[in_resp] = _cat((t.response_ids for t in trajs), np.int64)
    mask = np.zeros((b, resp_len), np.float32)
    mask[in_resp] = _cat((t.loss_mask for t in trajs), np.float32)
    lps = np.zeros((b, resp_len), np.float32)
    lps[in_resp] = _cat((t.logprobs for t in trajs), np.float32)
    turn_index = np.full((b, resp_len), -1, np.int64)
    token_rewards = np.zeros((b, resp_len), np.float32)
    for i, t in enumerate(trajs):
        for k, turn in enumerate(t.turns):
            turn_index[i, turn.start : turn.end] = k
        sampled_turns = [turn for turn in t.turns if turn.end > turn.start]
        if reward_on == "turn" and any(turn.reward for turn in sampled_turns):
            for turn in sampled_turns:  # each on its turn's last sampled token
                token_rewards[i, turn.end - 1] += turn.reward
            continue
        sampled = np.flatnonzero(mask[i])
        if sampled.size:
            token_rewards[i, sampled[-1]] = t.reward
    return TrainBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy(in_seq.astype(np.int64)),
        logit_index=torch.from_numpy(logit_index),
        responses=torch.from_numpy(responses),
        response_mask=torch.from_numpy(mask),
        rollout_log_probs=torch.from_numpy(lps),
        token_rewards=torch.from_numpy(token_rewards),
        turn_index=torch.from_numpy(turn_index),
        group_index=torch.tensor(gidx, dtype=torch.long),
        rewards=torch.tensor([t.reward for t in trajs], dtype=torch.float),
        multimodal=[t.multimodal for t in trajs] if any(t.multimodal for t in trajs) else [],
        episode_index=episode_index(trajs),
    )


def episode_index(trajs: list[Any]) -> torch.Tensor | None:
    """`[B]` dense episode ids from `metadata["episode"]` (a harness session: its segments
    share one), or None when no two rows share an episode."""
    keys = [t.metadata.get("episode") or ("row", i) for i, t in enumerate(trajs)]
    ids: dict[Any, int] = {}
    dense = [ids.setdefault(k, len(ids)) for k in keys]
    return torch.tensor(dense, dtype=torch.long) if len(ids) < len(keys) else None
