"""Batched next-token sampling for the hf engine, on the logits' device.

Each row carries its own temperature, top-k, top-p and `torch.Generator`, so a seeded request
samples the same tokens whatever else shares its batch: the noise is drawn per row from the
row's own generator (exponential race / Gumbel-max), never from a shared stream.

The returned logprob is log p(token) under `log_softmax(logits / T)` *before* top-k/top-p
filtering (plain `log_softmax(logits)` for greedy rows): that is the distribution the trainer
recomputes, so the importance ratio at step 0 is exactly 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.models.batch_invariant import scaled_lse


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    generators: Sequence[torch.Generator],
    allowed: torch.Tensor | None = None,
    inv_temp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of `logits` [B, V]; returns (token ids [B], logprobs [B]).

    `temperature` [B] float (0 = greedy), `top_k` [B] long (0 = off), `top_p` [B] float.
    `allowed` [B, V] bool (constrained decoding): the choice is made from the distribution
    renormalised over the allowed tokens (top-k/top-p apply after the mask, as in vLLM); the
    returned logprob is still the unmasked model's. `inv_temp` [B] float32: each row's
    1 / max(T, 1e-6) (1 for greedy) from its python temperature, the scale the trainer's
    recomputation multiplies by; the reported logprob is x[t] - logsumexp(x) with
    x = logits * inv_temp (`batch_invariant.scaled_lse`), the trainer's own form, so an
    exact engine and trainer agree bit for bit (default: from `temperature`).
    """
    logits = logits.float()
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)
    choice = logp
    if allowed is not None:
        choice = torch.log_softmax(logp.masked_fill(~allowed, float("-inf")), dim=-1)
    if not bool(greedy.all()):
        filtered = _filter_top_k_top_p(choice, top_k, top_p)
        # Exponential race: argmax(log p - log E), E ~ Exp(1), samples from softmax(log p).
        noise = torch.stack([_exp_noise(logp.shape[-1], g, logp.device) for g in generators])
        sampled = filtered - noise.log()
        choice = torch.where(greedy[:, None], choice, sampled)
    tokens = choice.argmax(dim=-1)
    if inv_temp is None:
        inv_temp = 1.0 / scale
    x, lse = scaled_lse(logits, inv_temp.to(logits.device)[:, None])
    return tokens, x.gather(-1, tokens[:, None]).squeeze(-1) - lse


def top_logprobs(
    logits: torch.Tensor, temperature: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k highest (logprobs, ids) per row [B, k], from the distribution `sample_tokens`
    reports logprobs under."""
    temperature = temperature.to(logits.device)
    scale = torch.where(temperature <= 0, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits.float() / scale[:, None], dim=-1)
    return logp.topk(min(k, logp.shape[-1]), dim=-1)


def top_pairs(top: tuple[torch.Tensor, torch.Tensor], row: int, k: int) -> list[tuple[int, float]]:
    """Row `row` of a `top_logprobs` result as k (token id, logprob) pairs."""
    vals, ids = top[0][row, :k].tolist(), top[1][row, :k].tolist()
    return list(zip(ids, vals, strict=True))


def constraint_masks(
    constraints: Sequence[Any], vocab: int, device: torch.device
) -> tuple[torch.Tensor | None, dict[int, str]]:
    """(allowed [B, V] bool or None when no row is constrained, {row: error}) from each row's
    `TokenConstraint` (None = free). A row whose constraint raises or allows nothing gets an
    error and no mask, so one bad request never fails its batch."""
    if all(c is None for c in constraints):
        return None, {}
    allowed = torch.ones(len(constraints), vocab, dtype=torch.bool)
    errors: dict[int, str] = {}
    for i, c in enumerate(constraints):
        if c is None:
            continue
        try:
            mask = c.allowed()
            if mask is None:
                continue
            mask = torch.as_tensor(mask, dtype=torch.bool)[:vocab]
            if not bool(mask.any()):
                raise ValueError("it allows no token")
        except Exception as exc:  # noqa: BLE001 - reported on the row
            errors[i] = f"{type(exc).__name__}: {exc}"
            continue
        allowed[i].zero_()
        allowed[i, : mask.shape[0]] = mask
    return allowed.to(device), errors


def run_hooks(
    params: Any, token: int, logprob: float, top: list[tuple[int, float]], advance: bool
) -> str | None:
    """After sampling `token`: advance the request's constraint (unless it finished) and call
    its `on_token`. Returns an error message instead of raising."""
    try:
        if advance and params.constraint is not None:
            params.constraint.accept(token)
        if params.on_token is not None:
            params.on_token(token, logprob, top)
    except Exception as exc:  # noqa: BLE001 - a bad hook fails its request only
        return f"{type(exc).__name__}: {exc}"
    return None


def _exp_noise(vocab: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.empty(vocab, device=device).exponential_(generator=generator)


def _filter_top_k_top_p(
    logp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Set log-probs outside each row's top-k / nucleus to -inf (the argmax always survives)."""
    vocab = logp.shape[-1]
    if bool((top_k <= 0).all()) and bool((top_p >= 1.0).all()):
        return logp
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logp.device)[None, :]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab))
    drop = ranks >= k[:, None]
    probs = sorted_logp.exp()
    # Keep the smallest prefix whose mass reaches top_p: drop a token once the mass *before*
    # it already does.
    drop |= (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
    drop[:, 0] = False
    mask = torch.zeros_like(drop).scatter(-1, order, drop)
    return logp.masked_fill(mask, float("-inf"))


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    """A per-request generator; unseeded requests draw a fresh seed from the global RNG."""
    gen = torch.Generator(device=device)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    gen.manual_seed(seed)
    return gen
