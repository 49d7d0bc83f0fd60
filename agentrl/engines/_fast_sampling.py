"""Graph-safe batched sampling for the fast hf path: no host syncs, no per-row launches.

Why not `_sampling.sample_tokens`: it draws noise from one `torch.Generator` per row (one
kernel per row) and branches on tensor values on the host, neither of which can live inside a
captured CUDA graph. Here every row's randomness is a *counter-based* uniform: a hash of
(request seed, token index), computed on device with integer ops. A seeded request therefore
samples the same tokens whatever else shares its batch, and replaying a graph needs no RNG
state. Sampling is by inverse CDF: one uniform per row against the float64 cumulative sum of
the (filtered) probabilities, so tail tokens keep their mass to ~1e-16.

The returned logprob is log p(token) under `log_softmax(logits / T)` before top-k/top-p
filtering (plain `log_softmax(logits)` for greedy rows), exactly as in `_sampling`.

Modes are chosen on the host from the rows' params (one graph per mode):
GREEDY (every row greedy), SAMPLE (no top-k/top-p anywhere), FILTER (some row filters).
"""

from __future__ import annotations

import torch

GREEDY, SAMPLE, FILTER = 0, 1, 2
# Rows of the per-row parameter tensor [6, B] (float64: every value is an exact integer
# below 2**53 or a float).
SEED_LO, SEED_HI, STEP, TEMP, TOP_K, TOP_P = range(6)
_MASK32 = 0xFFFFFFFF


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding values in [0, 2**32)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32  # int64 products wrap; the low 32 bits are exact
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def counter_uniform(
    seed_lo: torch.Tensor, seed_hi: torch.Tensor, step: torch.Tensor
) -> torch.Tensor:
    """A float64 uniform in [0, 1) per row, a pure function of (seed, step): 48 random bits."""
    h1 = _fmix32(seed_lo ^ _fmix32(seed_hi ^ _fmix32(step ^ 0x9E3779B9)))
    h2 = _fmix32(h1 ^ 0x5BD1E995)
    return (h1 >> 8).double() * 2.0**-24 + (h2 >> 8).double() * 2.0**-48


def split_seed(seed: int) -> tuple[int, int]:
    """A request seed (any int) as two 32-bit halves, the form `counter_uniform` takes."""
    seed &= (1 << 64) - 1
    return seed & _MASK32, seed >> 32


def sample_rows(
    logits: torch.Tensor, params: torch.Tensor, mode: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of `logits` [B, V]; `params` [6, B] float64 (rows above).

    Returns (token ids [B] int64, logprobs [B] float32). `mode` must be a Python int.
    """
    logits = logits.float()
    temp = params[TEMP].float()
    greedy = temp <= 0
    scale = torch.where(greedy, torch.ones_like(temp), temp)
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)
    best = logits.argmax(dim=-1)  # greedy picks like `generate`: argmax of the raw logits
    if mode == GREEDY:
        tokens = best
    else:
        step = params[STEP].long()
        u = counter_uniform(params[SEED_LO].long(), params[SEED_HI].long(), step)
        if mode == FILTER:
            drawn = _sample_filtered(logp, params[TOP_K].long(), params[TOP_P].float(), u)
        else:
            drawn = _inverse_cdf(logp.exp(), u)
        tokens = torch.where(greedy, best, drawn)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def sample_packed(logits: torch.Tensor, params: torch.Tensor, mode: int) -> torch.Tensor:
    """`sample_rows` as one [2, B] float64 tensor (token ids, logprobs): a graph's output,
    read back with one copy."""
    tokens, logps = sample_rows(logits, params, mode)
    return torch.stack([tokens.double(), logps.double()])


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i]: zero-probability entries are never hit."""
    cdf = probs.double().cumsum(dim=-1)
    target = (u * cdf[:, -1])[:, None]
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


def _sample_filtered(
    logp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """Top-k then nucleus filtering with `_sampling`'s rule, sampled in sorted order."""
    vocab = logp.shape[-1]
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    probs = sorted_logp.exp()
    ranks = torch.arange(vocab, device=logp.device)[None, :]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab))
    drop = ranks >= k[:, None]
    # Keep the smallest prefix whose mass reaches top_p (same float32 rule as `_sampling`).
    drop |= (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
    drop[:, 0] = False
    idx = _inverse_cdf(probs.masked_fill(drop, 0.0), u)
    return order.gather(-1, idx[:, None]).squeeze(-1)


def pick_mode(temps: list[float], top_ks: list[int], top_ps: list[float]) -> int:
    """The cheapest mode that is exact for these rows (host-side, from request params)."""
    sampled = [i for i, t in enumerate(temps) if t > 0]
    if not sampled:
        return GREEDY
    if any(top_ks[i] > 0 or top_ps[i] < 1.0 for i in sampled):
        return FILTER
    return SAMPLE
