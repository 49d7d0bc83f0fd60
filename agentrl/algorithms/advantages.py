"""Advantage estimators, selected by `algorithm.adv_estimator`.

Each estimator maps an `AdvantageInput` (per-token rewards over the response, the loss mask and
the prompt-group ids) to `(advantages, returns)`, both `[B, T]` and zero off the mask. They run
under `torch.no_grad()`: advantages are targets, never differentiated.

Outcome estimators (grpo, dr_grpo, rloo, opo, remax, reinforce_plus_plus_baseline, gspo) score
an episode by R_i = Σ_t r_{i,t}. With `algorithm.credit == "episode"` every trained token gets
R_i; with `"turn"` a token of turn k gets the turn return-to-go G_{i,k} = Σ_{j≥k} γ^(j−k) R_{i,j}.
Baselines are always built from episode scores R of the group, which keeps them independent of
the sample's own actions (up to the sample's own share of the group mean, as in GRPO).
`gae` and `reinforce_plus_plus` are token-level recursions and ignore `credit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentrl.algorithms._registry import lookup
from agentrl.algorithms.losses import policy_agg_mode
from agentrl.algorithms.masked import masked_whiten
from agentrl.algorithms.returns import discounted_returns, gae, turn_ids_from_mask, turn_returns
from agentrl.config.schema import AlgorithmConfig

GROUP_EPS = 1e-6


@dataclass
class AdvantageInput:
    """What an estimator may read. Tensors are `[B, T]` over response tokens unless noted.

    `token_rewards` carries each turn's/episode's reward on its last trained token (other
    positions 0) and may already include a per-token KL penalty (`algorithm.kl.placement`
    "reward"). Rewards found on untrained tokens are credited to the preceding trained token.
    """

    token_rewards: Tensor
    mask: Tensor
    # [B] prompt id; samples of one prompt share it. Needed by group-relative estimators.
    group_index: Tensor | None = None
    # Critic values V(s_t) for gae.
    values: Tensor | None = None
    old_log_probs: Tensor | None = None
    ref_log_probs: Tensor | None = None
    # [B] score of a greedy rollout of the same prompt (remax).
    baseline_rewards: Tensor | None = None
    # Turn id per token, −1 on untrained tokens; derived from mask spans when absent.
    turn_index: Tensor | None = None
    # Σ_v π_old(v | prefix)² at each response position (optimal_token_baseline).
    sum_pi_squared: Tensor | None = None
    # Detached rollout-correction weights, when `algorithm.tis_mode` is on (optimal baseline).
    is_weights: Tensor | None = None
    # [B] episode id, when one episode spans several rows (a harness that rewrote its
    # history: its session's segments share the episode's reward). The group statistics of
    # the mean/std/leave-one-out estimators then count each episode once. None: a row each.
    episode_index: Tensor | None = None


AdvantageFn = Callable[[AdvantageInput, AlgorithmConfig], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Estimator:
    """One registry entry: the estimator and its traits, declared where it is registered.

    The trainer and `agentrl.assembly` read the traits (never estimator names), so a plugin
    estimator states what it needs in its own `@register_adv_estimator(...)` and nothing
    else is edited.
    """

    fn: AdvantageFn
    # Reads `AdvantageInput.values`: the assembly builds a Critic (gae).
    needs_critic: bool = False
    # Reads `baseline_rewards`: the trainer rolls out one greedy episode per prompt (remax).
    greedy_baseline: bool = False
    # Reads `sum_pi_squared` (Σ_v π_old(v)² per position): one extra no-grad forward and the
    # π_old pass always run (optimal_token_baseline).
    sum_pi_squared: bool = False
    # verl whitens its advantages over the batch (`masked_whiten`, unbiased variance);
    # `algorithm.whiten_advantages` unset follows this, true/false overrides it.
    whitened: bool = False
    # Its baseline is the other samples of the prompt's group: `rollout.n >= 2` is checked
    # when the config loads (grpo, rloo, ...), not at the first step after SFT.
    group_relative: bool = False

    def __call__(self, inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
        return self.fn(inp, cfg)


ADV_ESTIMATORS: dict[str, Estimator] = {}


def register_adv_estimator(
    name: str,
    *,
    needs_critic: bool = False,
    greedy_baseline: bool = False,
    sum_pi_squared: bool = False,
    whitened: bool = False,
    group_relative: bool = False,
) -> Callable[[AdvantageFn], AdvantageFn]:
    """`@register_adv_estimator("name", needs_critic=..., ...)`: add an estimator with its
    traits (see `Estimator`); a duplicate name is refused."""

    def decorate(fn: AdvantageFn) -> AdvantageFn:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATORS[name] = Estimator(
            fn,
            needs_critic=needs_critic,
            greedy_baseline=greedy_baseline,
            sum_pi_squared=sum_pi_squared,
            whitened=whitened,
            group_relative=group_relative,
        )
        return fn

    return decorate


def get_estimator(name: str) -> Estimator:
    """The registry entry `name` (function and traits); KeyError listing the known names."""
    return lookup(ADV_ESTIMATORS, name, "advantage estimator")


def get_adv_estimator(name: str) -> AdvantageFn:
    """The estimator function registered as `name`; KeyError listing the known names."""
    return get_estimator(name).fn


def whitens_advantages(cfg: AlgorithmConfig) -> bool:
    """`algorithm.whiten_advantages`, or (unset) whether verl whitens this estimator."""
    if cfg.whiten_advantages is not None:
        return cfg.whiten_advantages
    return get_estimator(cfg.adv_estimator).whitened


def compute_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """Run `cfg.adv_estimator` without autograd, then whiten the advantages over the batch's
    trained tokens when `whitens_advantages(cfg)`; the entry point trainers call. Returns are
    never whitened (they are the critic's target)."""
    with torch.no_grad():
        adv, returns = get_adv_estimator(cfg.adv_estimator)(inp, cfg)
        if whitens_advantages(cfg):
            adv = masked_whiten(adv, inp.mask)
        return split_weighted(adv, inp.episode_index, policy_agg_mode(cfg)), returns


def split_weighted(adv: Tensor, episode_index: Tensor | None, mode: str) -> Tensor:
    """Under a `seq-mean-*` loss each row counts as one sequence, so the k segments of a
    split episode would weigh k episodes: their advantages are divided by k (the policy
    losses are linear in A), so the episode weighs what an unsplit one does. Token modes
    need nothing: each sampled token sits in exactly one segment."""
    if episode_index is None or not mode.startswith("seq-mean"):
        return adv
    _, episode = torch.unique(episode_index, return_inverse=True)
    rows = torch.bincount(episode).to(adv.dtype)[episode]
    return adv / rows.unsqueeze(-1)


# ---------------------------------------------------------------- shared pieces


def episode_scores(inp: AdvantageInput) -> Tensor:
    """R_i = Σ_t r_{i,t}: the episode's total reward, `[B]`."""
    return inp.token_rewards.sum(dim=-1)


def credit_returns(inp: AdvantageInput, cfg: AlgorithmConfig) -> Tensor:
    """Per-token returns under `cfg.credit`: R_i broadcast ("episode") or G_{i,k} ("turn")."""
    mask = inp.mask.to(inp.token_rewards.dtype)
    if cfg.credit == "episode":
        return episode_scores(inp).unsqueeze(-1) * mask
    turns = inp.turn_index if inp.turn_index is not None else turn_ids_from_mask(inp.mask)
    return turn_returns(inp.token_rewards, inp.mask, turns, cfg.gamma)


@dataclass
class GroupStats:
    """Per-sample statistics of its group's episode scores, each `[B]`; `inverse` maps each
    sample to a dense group id in [0, n_groups)."""

    inverse: Tensor
    size: Tensor
    total: Tensor
    mean: Tensor
    std: Tensor


def group_stats(
    scores: Tensor,
    group_index: Tensor | None,
    estimator: str,
    episode_index: Tensor | None = None,
) -> GroupStats:
    """Group size, sum, mean and unbiased std (÷(n−1)) of `scores`, gathered back per sample.

    With `episode_index`, the k rows of one episode each count 1/k: size counts episodes and
    the sums are over episodes (its rows share the episode's score), so a split episode is
    one sample of its group. Raises ValueError when a group has one sample: a group-relative
    baseline would then be the sample itself and the advantage identically 0, which is a
    config error (`rollout.n`).
    """
    if group_index is None:
        raise ValueError(f"advantage estimator {estimator!r} needs AdvantageInput.group_index")
    _, inverse = torch.unique(group_index, return_inverse=True)
    weight = torch.ones_like(scores)
    if episode_index is not None:
        _, episode = torch.unique(episode_index, return_inverse=True)
        weight = 1.0 / torch.bincount(episode).to(scores.dtype)[episode]
    size = torch.zeros(int(inverse.max()) + 1, dtype=scores.dtype).scatter_add_(0, inverse, weight)
    if bool((size < 2).any()):
        raise ValueError(
            f"advantage estimator {estimator!r} is group-relative and needs >= 2 samples per "
            f"group (rollout.n >= 2); got a group of size 1"
        )
    total = torch.zeros_like(size).scatter_add_(0, inverse, weight * scores)
    mean = total / size
    sq = torch.zeros_like(size).scatter_add_(0, inverse, weight * (scores - mean[inverse]) ** 2)
    std = (sq / (size - 1)).sqrt()
    return GroupStats(inverse, size[inverse], total[inverse], mean[inverse], std[inverse])


def _relative(inp: AdvantageInput, cfg: AlgorithmConfig, baseline: Tensor) -> Tensor:
    """Credit returns minus a per-sample baseline `[B]`, zero off the mask."""
    mask = inp.mask.to(inp.token_rewards.dtype)
    return (credit_returns(inp, cfg) - baseline.unsqueeze(-1)) * mask


# ---------------------------------------------------------------- estimators


@register_adv_estimator("gae", needs_critic=True, whitened=True)
def gae_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """PPO with a critic: GAE(γ, λ) over trained tokens (see `returns.gae`)."""
    if inp.values is None:
        raise ValueError("advantage estimator 'gae' needs AdvantageInput.values (a critic)")
    return gae(inp.token_rewards, inp.values, inp.mask, cfg.gamma, cfg.lam)


def _grpo(inp: AdvantageInput, cfg: AlgorithmConfig, name: str) -> tuple[Tensor, Tensor]:
    stats = group_stats(episode_scores(inp), inp.group_index, name, inp.episode_index)
    adv = _relative(inp, cfg, stats.mean)
    if cfg.norm_adv_by_std:
        adv = adv / (stats.std.unsqueeze(-1) + GROUP_EPS)
    return adv, credit_returns(inp, cfg)


@register_adv_estimator("grpo", group_relative=True)
def grpo_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """A = (G − mean_g R) / (std_g R + ε); without the std division if not norm_adv_by_std.

    Dividing by the group std up-weights near-deterministic prompts (Dr.GRPO's critique);
    `algorithm.norm_adv_by_std: false` turns it off.
    """
    return _grpo(inp, cfg, "grpo")


@register_adv_estimator("gspo", group_relative=True)
def gspo_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """GSPO uses GRPO's group-normalised advantages; it differs in the loss (sequence ratio)."""
    return _grpo(inp, cfg, "gspo")


@register_adv_estimator("dr_grpo", group_relative=True)
def dr_grpo_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """A = G − mean_g R: no std scaling. Pair with `loss_agg_mode: seq-mean-token-sum`."""
    stats = group_stats(episode_scores(inp), inp.group_index, "dr_grpo", inp.episode_index)
    return _relative(inp, cfg, stats.mean), credit_returns(inp, cfg)


@register_adv_estimator("rloo", group_relative=True)
def rloo_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """Leave-one-out: A_i = G_i − (Σ_{j∈g} R_j − R_i)/(n − 1); the baseline excludes i."""
    scores = episode_scores(inp)
    stats = group_stats(scores, inp.group_index, "rloo", inp.episode_index)
    loo = (stats.total - scores) / (stats.size - 1)
    return _relative(inp, cfg, loo), credit_returns(inp, cfg)


@register_adv_estimator("opo", group_relative=True)
def opo_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """Length-weighted group baseline: b_g = Σ l_j R_j / Σ l_j, l_j = trained tokens of j."""
    scores = episode_scores(inp)
    inverse = group_stats(scores, inp.group_index, "opo").inverse
    lengths = inp.mask.to(scores.dtype).sum(dim=-1)
    n_groups = int(inverse.max().item()) + 1
    weighted = scores.new_zeros(n_groups).scatter_add_(0, inverse, lengths * scores)
    total_len = scores.new_zeros(n_groups).scatter_add_(0, inverse, lengths)
    baseline = (weighted / total_len.clamp(min=1.0))[inverse]
    return _relative(inp, cfg, baseline), credit_returns(inp, cfg)


@register_adv_estimator("remax", greedy_baseline=True)
def remax_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """A = G − R_greedy: the greedy rollout's score of the same prompt is the baseline."""
    if inp.baseline_rewards is None:
        raise ValueError(
            "advantage estimator 'remax' needs AdvantageInput.baseline_rewards (the greedy "
            "rollout's reward per row; the trainer fills it for `greedy_baseline` estimators)"
        )
    if inp.baseline_rewards.shape != inp.token_rewards.shape[:1]:
        raise ValueError(
            f"advantage estimator 'remax': baseline_rewards must be [B] = "
            f"[{inp.token_rewards.shape[0]}], got {list(inp.baseline_rewards.shape)}"
        )
    base = inp.baseline_rewards.to(inp.token_rewards.dtype)
    return _relative(inp, cfg, base), credit_returns(inp, cfg)


@register_adv_estimator("reinforce_plus_plus")
def reinforce_pp_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """REINFORCE++: token return-to-go G_t = r_t + γ G_next(t), whitened over the batch."""
    returns = discounted_returns(inp.token_rewards, inp.mask, cfg.gamma)
    return masked_whiten(returns, inp.mask), returns


@register_adv_estimator("reinforce_plus_plus_baseline", group_relative=True)
def reinforce_pp_baseline_advantages(
    inp: AdvantageInput, cfg: AlgorithmConfig
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline: A = whiten_batch(G − mean_g R) over trained tokens."""
    stats = group_stats(
        episode_scores(inp), inp.group_index, "reinforce_plus_plus_baseline", inp.episode_index
    )
    adv = _relative(inp, cfg, stats.mean)
    return masked_whiten(adv, inp.mask), credit_returns(inp, cfg)


@register_adv_estimator("grpo_passk", group_relative=True)
def grpo_passk_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """Pass@k with k = group size (Tang et al. 2025): the leave-one-out gradient of the
    group's max reward, A_i = max_g R − max_{g∖i} R. Only a unique best sample gets a non-zero
    advantage, R_best − R_second; ties give 0. Divided by (std_g R + ε) if norm_adv_by_std.
    Outcome-level: every trained token gets A_i whatever `credit` says (as verl)."""
    scores = episode_scores(inp)
    stats = group_stats(scores, inp.group_index, "grpo_passk")
    n_groups = int(stats.inverse.max().item()) + 1
    top = scores.new_full((n_groups,), -torch.inf).scatter_reduce(0, stats.inverse, scores, "amax")
    is_top = scores == top[stats.inverse]
    # The first sample reaching the max is "the" best; any other at the max makes it a tie
    # (R_best − R_second = 0).
    b = scores.shape[0]
    rows = torch.arange(b, device=scores.device)
    candidates = torch.where(is_top, rows, torch.full_like(rows, b))
    first = torch.full((n_groups,), b, device=scores.device, dtype=torch.long)
    first = first.scatter_reduce(0, stats.inverse, candidates, "amin")
    best = rows == first[stats.inverse]
    second = scores.new_full((n_groups,), -torch.inf).scatter_reduce(
        0, stats.inverse, torch.where(best, -torch.inf, scores), "amax"
    )
    adv = torch.where(best, scores - second[stats.inverse], torch.zeros_like(scores))
    if cfg.norm_adv_by_std:
        adv = adv / (stats.std + GROUP_EPS)
    mask = inp.mask.to(scores.dtype)
    return adv.unsqueeze(-1) * mask, credit_returns(inp, cfg)


@register_adv_estimator("gpg", group_relative=True)
def gpg_advantages(inp: AdvantageInput, cfg: AlgorithmConfig) -> tuple[Tensor, Tensor]:
    """GPG (Chu et al. 2025): A = α·(G − mean_g R) with no std division (F_norm = 1) and the
    batch-level correction α = B / #{i : R_i ≠ 0}, as verl computes it. (The paper's α is
    B / (B − M), M = samples in groups whose rewards all agree; the two coincide when every
    informative sample has a non-zero reward.)"""
    scores = episode_scores(inp)
    stats = group_stats(scores, inp.group_index, "gpg", inp.episode_index)
    alpha = scores.shape[0] / (scores != 0).sum().clamp(min=1).to(scores.dtype)
    return alpha * _relative(inp, cfg, stats.mean), credit_returns(inp, cfg)
