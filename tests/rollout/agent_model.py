"""A tiny Qwen2 fine-tuned for a few seconds on oracle `math/calc-v0` episodes, so that
sampling yields real multi-turn tool episodes (a random-init model almost never emits a tool
call). Shared by the rollout and serve tests; cached beside the tiny checkpoint."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import agentrl.envs as envs
from agentrl.chat import ChatFormat
from agentrl.models.tiny import build_tiny

AGENT_VERSION = 1  # bump when `finetune` changes


def agent_path() -> Path:
    return cached_finetune(f"-calc-agent-v{AGENT_VERSION}", finetune)


def cached_finetune(suffix: str, finetune: Callable[[Path, Path], Path]) -> Path:
    """`finetune(tiny, out)` of the tiny qwen2, built once per machine beside the
    content-hashed tiny checkpoint (its name + `suffix`); a concurrent build is harmless."""
    tiny = build_tiny("qwen2")
    out = tiny.with_name(tiny.name + suffix)
    if not (out / "config.json").exists():
        tmp = finetune(tiny, out.with_name(out.name + f".tmp{os.getpid()}"))
        if not out.exists():
            tmp.rename(out)
    return out


def oracle_sequences(chat: ChatFormat, n: int) -> list[list[int]]:
    seqs = []
    for seed in range(n):
        env = envs.make("math/calc-v0")
        obs, _ = env.reset(seed=seed)
        msgs = list(obs.messages)
        for _ in range(env.max_turns):
            action = env.oracle_action()
            msgs.append(action)
            out, _, terminated, truncated, _ = env.step(action)
            msgs += out.messages
            if terminated or truncated:
                break
        seqs.append(chat.encode(chat.render(msgs, obs.tools)))
    return seqs


def finetune(path: Path, out: Path, steps: int = 80) -> Path:
    """Plain LM loss on rendered oracle episodes; a few seconds on CPU."""
    tok = AutoTokenizer.from_pretrained(path)
    seqs = oracle_sequences(ChatFormat(tok), 64)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
    labels = ids.masked_fill(mask == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train_lm(model, opt, ids, mask, labels, steps, batch=16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def train_lm(
    model: Any, opt: Any, ids: Any, mask: Any, labels: Any, steps: int, batch: int
) -> None:
    """`steps` LM-loss steps on random batches of `batch` rows, on one thread (tiny matmuls:
    extra threads only contend on a busy CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            idx = torch.randint(0, len(ids), (batch,))
            loss = model(input_ids=ids[idx], attention_mask=mask[idx], labels=labels[idx]).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
