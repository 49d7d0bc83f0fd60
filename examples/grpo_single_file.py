"""GRPO for a multi-turn, tool-calling LLM agent in one file (cleanrl style).

Everything the library spreads over roles is inline here so it can be read top to bottom:
token-exact multi-turn rollouts with plain torch generation, the calculator tool answered by
the env between turns, GRPO group advantages, and the clipped policy-gradient update. Only the
env (`agentrl.make`) and the tiny model builder come from agentrl; no trainer, no engine.

    python examples/grpo_single_file.py                      # tiny model, CPU, a few minutes
    python examples/grpo_single_file.py --model /ckpt/Qwen2.5-0.5B-Instruct --device cuda

A random-init model never emits a tool call, so a short warm start on the env's oracle
demonstrations (`--sft-steps`) comes first; GRPO then improves the policy by trial and error.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import random
import re
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import agentrl
from agentrl.models.tiny import build_tiny
from agentrl.types import Message, ToolCall


@dataclass
class Args:
    env_id: str = "math/calc-easy-v0"
    """the agentrl env: a question, a calculator tool, reward 1 for the exact answer"""
    model: str = "tiny:qwen2"
    """`tiny:<preset>` (random init, built locally) or a local HF checkpoint directory"""
    seed: int = 1
    """seed of the experiment"""
    device: str = "cpu"
    """torch device"""
    total_steps: int = 20
    """GRPO iterations (rollout + update)"""
    prompts_per_step: int = 8
    """tasks per iteration"""
    group_size: int = 4
    """samples per task: the GRPO group"""
    max_turns: int = 3
    """assistant turns per episode"""
    max_new_tokens: int = 40
    """generation budget per turn"""
    temperature: float = 1.0
    """sampling temperature (the loss uses the same one)"""
    learning_rate: float = 3e-4
    """Adam learning rate for GRPO"""
    update_epochs: int = 2
    """passes over each batch (ratios move off 1 after the first)"""
    num_minibatches: int = 2
    """optimizer steps per epoch"""
    clip_coef: float = 0.2
    """PPO ratio clip"""
    max_grad_norm: float = 1.0
    """gradient clipping"""
    sft_steps: int = 150
    """warm-start steps on oracle demonstrations (0 = none)"""
    sft_demos: int = 128
    """oracle episodes to warm-start on"""
    sft_lr: float = 3e-3
    """warm-start learning rate"""
    eval_episodes: int = 32
    """greedy held-out episodes before and after training"""


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


# ---------------------------------------------------------------------------------- chat
# Prompts are rendered once with the model's chat template; after that, sampled ids are kept
# verbatim and only the template's text for the *new* messages is appended (the "fixed base"
# trick: render [user, assistant(MARKER), *new] and keep what follows MARKER). Nothing the
# model sampled is ever re-tokenized, so training sees exactly the sampled sequence.
MARKER = "MARKERXQZ"
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def render(tok, messages, tools, gen_prompt: bool) -> str:
    chat = [m.to_chat() if isinstance(m, Message) else m for m in messages]
    return tok.apply_chat_template(
        chat, tools=tools or None, tokenize=False, add_generation_prompt=gen_prompt
    )


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def observation_ids(tok, new_messages, tools, stop_ids: set[int]) -> list[int]:
    """Ids between the end of the sampled turn and the next generation: tool results etc."""
    base = [Message("user", "U"), Message("assistant", MARKER)]
    text = render(tok, base + list(new_messages), tools, gen_prompt=True).split(MARKER, 1)[1]
    ids = encode(tok, text)
    return ids[1:] if ids and ids[0] in stop_ids else ids  # the sampled turn already ended


def assistant_ids(tok, message: Message, tools) -> list[int]:
    """The ids a template-following model would sample for `message` (used for demos)."""
    head = render(tok, [Message("user", "U")], tools, gen_prompt=True)
    full = render(tok, [Message("user", "U"), message], tools, gen_prompt=False)
    ids = encode(tok, full[len(head) :])
    end = tok.convert_tokens_to_ids("<|im_end|>")
    return ids[: ids.index(end) + 1] if end in ids else ids


def parse(text: str) -> tuple[str, list[ToolCall]]:
    """Hermes-style tool calls: <tool_call>{"name": ..., "arguments": {...}}</tool_call>."""
    calls = []
    for raw in TOOL_CALL.findall(text):
        try:
            obj = json.loads(raw)
            calls.append(ToolCall(str(obj["name"]), dict(obj.get("arguments") or {})))
        except (ValueError, KeyError, TypeError):
            pass  # a malformed call is just text; the env answers it as a final message
    return TOOL_CALL.sub("", text).strip(), calls


# ---------------------------------------------------------------------------------- generation
@torch.no_grad()
def generate(
    model, prompts: list[list[int]], args: Args, stop_ids: set[int], pad_id: int, greedy: bool
):
    """Batched sampling with a KV cache: left-pad the prompts, then one token per step for all."""
    # transformers renamed `past_key_values` to `cache` (5.x); use whichever this model takes
    cache_kw = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    device, width = args.device, max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    outputs: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(args.max_new_tokens):
        logits = out.logits[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(logits / args.temperature, -1), 1).squeeze(-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                outputs[i].append(t)
                done[i] = t in stop_ids
        if all(done):
            break
        mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
        pos = pos[:, -1:] + 1
        cache = getattr(out, "cache", None) or out.past_key_values
        out = model(
            input_ids=nxt[:, None],
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **{cache_kw: cache},
        )
    return outputs


# ---------------------------------------------------------------------------------- rollout
@dataclass
class Episode:
    env: object
    tools: list
    prompt: list[int]
    ids: list[int] = dataclasses.field(default_factory=list)  # everything after the prompt
    mask: list[int] = dataclasses.field(default_factory=list)  # 1 = sampled by the policy
    reward: float = 0.0
    done: bool = False


def rollouts(
    model, tok, seeds: list[int], n: int, args: Args, greedy: bool = False
) -> list[Episode]:
    """`n` multi-turn episodes per seed: generate for all live episodes, let envs answer."""
    stop_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id}
    episodes = []
    for seed in seeds:
        for _ in range(n):
            env = agentrl.make(args.env_id)
            obs, _ = env.reset(seed=seed)
            prompt = encode(tok, render(tok, obs.messages, obs.tools, gen_prompt=True))
            episodes.append(Episode(env, obs.tools, prompt))
    model.eval()
    for turn in range(args.max_turns):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        samples = generate(
            model, [e.prompt + e.ids for e in live], args, stop_ids, tok.pad_token_id, greedy
        )
        for e, sampled in zip(live, samples, strict=True):
            e.ids, e.mask = e.ids + sampled, e.mask + [1] * len(sampled)
            if not sampled or sampled[-1] not in stop_ids:  # out of tokens: no answer, reward 0
                e.done = True
                continue
            content, calls = parse(tok.decode(sampled[:-1]))
            obs, reward, terminated, truncated, _ = e.env.step(
                Message("assistant", content, tool_calls=calls)
            )
            e.reward += float(reward)
            if terminated or truncated or turn == args.max_turns - 1:
                e.done = True
                continue
            delta = observation_ids(tok, obs.messages, e.tools, stop_ids)
            e.ids, e.mask = e.ids + delta, e.mask + [0] * len(delta)
    for e in episodes:
        e.env.close()
    return episodes


def oracle_episode(tok, env, seed: int) -> Episode:
    """The env's oracle played through the same token layout as a sampled episode."""
    stop_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id}
    obs, _ = env.reset(seed=seed)
    e = Episode(env, obs.tools, encode(tok, render(tok, obs.messages, obs.tools, gen_prompt=True)))
    while not e.done:
        action = env.oracle_action()
        sampled = assistant_ids(tok, action, e.tools)
        e.ids, e.mask = e.ids + sampled, e.mask + [1] * len(sampled)
        obs, reward, terminated, truncated, _ = env.step(action)
        e.reward, e.done = e.reward + float(reward), terminated or truncated
        if not e.done:
            delta = observation_ids(tok, obs.messages, e.tools, stop_ids)
            e.ids, e.mask = e.ids + delta, e.mask + [0] * len(delta)
    return e


# ---------------------------------------------------------------------------------- tensors
def to_batch(episodes: list[Episode], pad_id: int, device: str):
    """Right-padded prompt+response ids and a mask over the positions that *predict* a sampled
    token (position t's logits predict token t+1)."""
    width = max(len(e.prompt) + len(e.ids) for e in episodes)
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros(len(episodes), width - 1)
    for i, e in enumerate(episodes):
        seq = e.prompt + e.ids
        ids[i, : len(seq)], attn[i, : len(seq)] = torch.tensor(seq), 1
        loss_mask[i, len(e.prompt) - 1 : len(seq) - 1] = torch.tensor(e.mask, dtype=torch.float)
    return ids.to(device), attn.to(device), loss_mask.to(device)


def token_logprobs(model, ids, attn, temperature: float) -> torch.Tensor:
    """log π(token t+1 | ≤ t) at every position, `[B, L−1]`, of softmax(logits / T)."""
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def evaluate(model, tok, args: Args, seeds: list[int]) -> float:
    eps = rollouts(model, tok, seeds, 1, args, greedy=True)
    return sum(e.reward >= 1.0 for e in eps) / max(len(eps), 1)


if __name__ == "__main__":
    args = parse_args()

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    path = (
        str(build_tiny(args.model.split(":", 1)[1]))
        if args.model.startswith("tiny:")
        else args.model
    )
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(args.device)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    eval_seeds = [1_000_000 + i for i in range(args.eval_episodes)]

    # WARM START: supervised steps on the env oracle's episodes (tool call, then answer)
    if args.sft_steps:
        env = agentrl.make(args.env_id)
        demos = [oracle_episode(tok, env, 2_000_000 + i) for i in range(args.sft_demos)]
        env.close()
        opt = torch.optim.AdamW(model.parameters(), lr=args.sft_lr)
        model.train()
        for _ in range(args.sft_steps):
            ids, attn, m = to_batch(random.sample(demos, min(16, len(demos))), pad_id, args.device)
            loss = -(token_logprobs(model, ids, attn, 1.0) * m).sum() / m.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"warm start: {args.sft_steps} SFT steps, final loss {loss.item():.3f}")
    if args.eval_episodes:
        print(f"eval before: success {evaluate(model, tok, args, eval_seeds):.3f}")

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for step in range(1, args.total_steps + 1):
        t0 = time.time()
        seeds = [step * 10_000 + i for i in range(args.prompts_per_step)]
        episodes = rollouts(model, tok, seeds, args.group_size, args)

        # ALGO LOGIC: GRPO advantages. Each episode's reward minus its group's mean, divided
        # by the group's std: the other samples of the same task are the baseline (no critic).
        rewards = torch.tensor([e.reward for e in episodes]).view(-1, args.group_size)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
        adv = adv.flatten().to(args.device)

        # ALGO LOGIC: old log-probs, recomputed by the training forward (same kernels as the
        # update) so the ratio is exactly 1 at the first step of the first epoch.
        ids, attn, loss_mask = to_batch(episodes, pad_id, args.device)
        model.eval()
        with torch.no_grad():
            old_logp = token_logprobs(model, ids, attn, args.temperature)

        # ALGO LOGIC: clipped policy gradient on sampled tokens only (tool results are masked),
        # averaged over all sampled tokens of the mini-batch (token-mean).
        model.train()
        batch_size = len(episodes)
        mb_size = max(1, batch_size // args.num_minibatches)
        for _epoch in range(args.update_epochs):
            order = torch.randperm(batch_size)
            for start in range(0, batch_size, mb_size):
                mb = order[start : start + mb_size].to(args.device)
                logp = token_logprobs(model, ids[mb], attn[mb], args.temperature)
                ratio = torch.exp(logp - old_logp[mb])
                a = adv[mb, None]
                pg_loss1 = -a * ratio
                pg_loss2 = -a * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                m = loss_mask[mb]
                pg_loss = (torch.max(pg_loss1, pg_loss2) * m).sum() / m.sum().clamp(min=1)
                optimizer.zero_grad()
                pg_loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                clipped = ((ratio - 1).abs() > args.clip_coef).float()
                clipfrac = (clipped * m).sum() / m.sum().clamp(min=1)

        success = float((rewards >= 1.0).float().mean())
        tokens = float(loss_mask.sum()) / batch_size
        print(
            f"step {step} reward {rewards.mean():.3f} success {success:.3f} "
            f"sampled_tokens {tokens:.1f} loss {pg_loss.item():.4f} "
            f"clipfrac {clipfrac.item():.3f} time {time.time() - t0:.1f}s"
        )

    if args.eval_episodes:
        print(f"eval after: success {evaluate(model, tok, args, eval_seeds):.3f}")
