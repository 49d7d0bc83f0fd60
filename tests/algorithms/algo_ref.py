"""Independent reference implementations: plain Python/numpy, one row at a time.

Written from the formulas in docs/algorithms.md, not from agentrl.algorithms, so the tests
compare two separate derivations. Multi-turn rows are handled by compacting: take the trained
positions, run the textbook single-sequence algorithm on them, scatter back.
"""

from __future__ import annotations

import math

import numpy as np


def trained_positions(mask_row) -> list[int]:
    return [t for t, m in enumerate(mask_row) if m > 0]


def fold_row(rewards_row, mask_row) -> list[float]:
    """Rewards on untrained tokens go to the last trained token before them (else dropped)."""
    out = [0.0] * len(rewards_row)
    last = None
    for t, (r, m) in enumerate(zip(rewards_row, mask_row, strict=True)):
        if m > 0:
            last = t
            out[t] += r
        elif last is not None:
            out[last] += r
    return out


def scatter(values, positions, length) -> list[float]:
    out = [0.0] * length
    for v, p in zip(values, positions, strict=True):
        out[p] = v
    return out


def gae_row(rewards_row, values_row, mask_row, gamma, lam):
    pos = trained_positions(mask_row)
    r = [fold_row(rewards_row, mask_row)[p] for p in pos]
    v = [values_row[p] for p in pos]
    n = len(pos)
    adv = [0.0] * n
    running = 0.0
    for k in reversed(range(n)):
        v_next = v[k + 1] if k + 1 < n else 0.0
        delta = r[k] + gamma * v_next - v[k]
        running = delta + gamma * lam * running
        adv[k] = running
    ret = [a + b for a, b in zip(adv, v, strict=True)]
    length = len(mask_row)
    return scatter(adv, pos, length), scatter(ret, pos, length)


def discounted_row(rewards_row, mask_row, gamma):
    pos = trained_positions(mask_row)
    r = [fold_row(rewards_row, mask_row)[p] for p in pos]
    g = [0.0] * len(pos)
    running = 0.0
    for k in reversed(range(len(pos))):
        running = r[k] + gamma * running
        g[k] = running
    return scatter(g, pos, len(mask_row))


def turn_spans(mask_row) -> list[list[int]]:
    spans, cur = [], []
    for t, m in enumerate(mask_row):
        if m > 0:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    return spans


def turn_returns_row(rewards_row, mask_row, gamma):
    folded = fold_row(rewards_row, mask_row)
    spans = turn_spans(mask_row)
    turn_r = [sum(folded[t] for t in span) for span in spans]
    out = [0.0] * len(mask_row)
    for k, span in enumerate(spans):
        g = sum(gamma ** (j - k) * turn_r[j] for j in range(k, len(spans)))
        for t in span:
            out[t] = g
    return out


def groups(group_index) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group_index):
        out.setdefault(int(g), []).append(i)
    return out


def returns_rows(rewards, mask, credit, gamma):
    """Per-token returns under the credit mode, as a numpy [B, T] array."""
    rows = []
    for r_row, m_row in zip(rewards, mask, strict=True):
        if credit == "episode":
            score = float(sum(r_row))
            rows.append([score if m > 0 else 0.0 for m in m_row])
        else:
            rows.append(turn_returns_row(r_row, m_row, gamma))
    return np.array(rows)


def group_baseline_adv(rewards, mask, group_index, credit, gamma, kind, norm=True):
    """grpo / dr_grpo / rloo / opo advantages with explicit per-group loops."""
    rewards, mask = np.asarray(rewards), np.asarray(mask)
    scores = rewards.sum(axis=1)
    rets = returns_rows(rewards, mask, credit, gamma)
    adv = np.zeros_like(rets)
    for members in groups(group_index).values():
        s = scores[members]
        n = len(members)
        for j, i in enumerate(members):
            if kind in ("grpo", "dr_grpo"):
                base = s.mean()
            elif kind == "rloo":
                base = (s.sum() - s[j]) / (n - 1)
            elif kind == "opo":
                lens = mask[members].sum(axis=1)
                base = (lens * s).sum() / max(lens.sum(), 1.0)
            else:
                raise ValueError(kind)
            a = rets[i] - base
            if kind == "grpo" and norm:
                a = a / (np.std(s, ddof=1) + 1e-6)
            adv[i] = a * (mask[i] > 0)
    return adv


def whiten(x, mask):
    """(x − mean)/sqrt(var + 1e-8) over the masked entries, var unbiased (÷ N − 1)."""
    x, mask = np.asarray(x, dtype=np.float64), np.asarray(mask) > 0
    vals = x[mask]
    if vals.size < 2:
        return np.zeros_like(x)
    out = (x - vals.mean()) / math.sqrt(vals.var(ddof=1) + 1e-8)
    return out * mask


# ---------------------------------------------------------------- losses


def aggregate(loss, mask, mode):
    loss, mask = np.asarray(loss, dtype=np.float64), np.asarray(mask, dtype=np.float64)
    if mode == "token-mean":
        return (loss * mask).sum() / mask.sum() if mask.sum() > 0 else 0.0
    per_seq = []
    for lrow, mrow in zip(loss, mask, strict=True):
        if mrow.sum() == 0:
            continue
        total = (lrow * mrow).sum()
        per_seq.append(total if mode == "seq-mean-token-sum" else total / mrow.sum())
    return float(np.mean(per_seq)) if per_seq else 0.0


def ppo_token(lp, old, a, clip_low, clip_high, dual_c):
    ratio = math.exp(lp - old)
    l1 = -a * ratio
    l2 = -a * min(max(ratio, 1 - clip_low), 1 + clip_high)
    loss = max(l1, l2)
    if dual_c > 0 and a < 0:
        loss = min(loss, -a * dual_c)
    return loss


def k_estimators(lp, ref):
    d = lp - ref
    k3 = math.exp(ref - lp) - (ref - lp) - 1
    return {"k1": d, "abs": abs(d), "k2": 0.5 * d * d, "k3": min(max(k3, -10.0), 10.0)}


def aggregate_ext(loss, mask, mode, scale=0.0):
    """`aggregate` plus token-sum (Σ l·m) and Dr.GRPO's seq-mean-token-sum-norm
    (mean_i Σ_t l·m / L, L = scale or the row width)."""
    loss, mask = np.asarray(loss, dtype=np.float64), np.asarray(mask, dtype=np.float64)
    if mode == "token-sum":
        return float((loss * mask).sum())
    if mode == "seq-mean-token-sum-norm":
        return aggregate(loss, mask, "seq-mean-token-sum") / (scale or mask.shape[-1])
    return aggregate(loss, mask, mode)


# ---------------------------------------------------------------- new estimators (papers)


def passk_adv(scores, group_index, norm):
    """Tang et al. 2025, pass@k with k = n: A_i = max_g R − max_{g∖i} R (LOO of the max)."""
    scores = np.asarray(scores, dtype=np.float64)
    adv = np.zeros_like(scores)
    for members in groups(group_index).values():
        s = scores[members]
        for j, i in enumerate(members):
            a = s.max() - np.delete(s, j).max()
            adv[i] = a / (np.std(s, ddof=1) + 1e-6) if norm else a
    return adv


def gpg_adv(scores, group_index):
    """Chu et al. 2025 with F_norm = 1; α = B / #{non-zero rewards} (verl's α, see docs)."""
    scores = np.asarray(scores, dtype=np.float64)
    alpha = len(scores) / max(int((scores != 0).sum()), 1)
    adv = np.zeros_like(scores)
    for members in groups(group_index).values():
        adv[members] = alpha * (scores[members] - scores[members].mean())
    return adv


def otb_adv(rewards, mask, group_index, old_lp, sum_pi_sq, is_w=None, zero_tail=True):
    """Optimal token baseline, per group and trained step k (compacted rows):
    W_{i,k} = Σ_{j≤k} (1 − 2π_j + Σπ²)·ρ_j², G_{i,k} = reward-to-go,
    B_k = Σ_i G W / (Σ_i W + 1e-8) over the samples that reach step k, A = G − B."""
    rewards, mask = np.asarray(rewards, dtype=np.float64), np.asarray(mask)
    b = len(mask)
    rows = []
    for i in range(b):
        pos = trained_positions(mask[i])
        folded = fold_row(rewards[i], mask[i])
        r = [folded[p] for p in pos]
        w_tok = [1 - 2 * math.exp(old_lp[i][p]) + sum_pi_sq[i][p] for p in pos]
        if is_w is not None:
            w_tok = [w * is_w[i][p] ** 2 for w, p in zip(w_tok, pos, strict=True)]
        g = [sum(r[k:]) for k in range(len(pos))]
        w = list(np.cumsum(w_tok))
        rows.append((pos, g, w))
    out = np.zeros(np.shape(mask))
    for members in groups(group_index).values():
        lengths = {i: len(rows[i][0]) for i in members}
        tail = None  # (row, from step) whose baseline is zeroed
        nonempty = sorted((n for n in lengths.values() if n), reverse=True)
        if zero_tail and len(nonempty) >= 2 and nonempty[0] > nonempty[1]:
            tail = (next(i for i in members if lengths[i] == nonempty[0]), nonempty[1])
        for i in members:
            pos, g, _ = rows[i]
            for k, p in enumerate(pos):
                reach = [j for j in members if lengths[j] > k]
                num = sum(rows[j][1][k] * rows[j][2][k] for j in reach)
                den = sum(rows[j][2][k] for j in reach)
                base = num / (den + 1e-8)
                if tail is not None and i == tail[0] and k >= tail[1]:
                    base = 0.0
                out[i, p] = g[k] - base
    return out


# ---------------------------------------------------------------- new losses (papers)


def sapo_token(lp, old, a, tau_pos, tau_neg):
    """Gao et al. 2025: −f(r)·A, f(r) = σ(τ(r − 1))·4/τ, τ by the sign of A."""
    r = math.exp(lp - old)
    tau = tau_pos if a > 0 else tau_neg
    return -(1 / (1 + math.exp(-tau * (r - 1)))) * 4 / tau * a


def gmpo_seq(lp_row, old_row, adv_row, mask_row, clip_low, clip_high):
    """Zhao et al. 2025 (GMPO), one sequence: −A·exp(mean_t s·min(s·d_t, s·clip(d_t))), d_t the
    token log-ratio and s the sign of the advantage (per token: the paper's A is per sequence,
    where both agree)."""
    pos = trained_positions(mask_row)
    a = float(np.mean([adv_row[p] for p in pos]))
    logs = []
    for p in pos:
        s = float(np.sign(adv_row[p]))
        d = lp_row[p] - old_row[p]
        c = min(max(d, -clip_low), clip_high)
        logs.append(s * min(s * d, s * c))
    return -a * math.exp(float(np.mean(logs)))


def covariances(lp, adv, mask):
    """Cui et al. 2025: Cov_t = (log π_t − mean log π)(A_t − mean A) over trained tokens."""
    lp, adv, mask = (np.asarray(x, dtype=np.float64) for x in (lp, adv, mask))
    sel = mask > 0
    return (lp - lp[sel].mean()) * (adv - adv[sel].mean())


def adaptive_kl_trace(beta, target, horizon, n, kls):
    """Ziegler et al. 2019, §2.2: e = clip(KL/target − 1, ±0.2), β ← β(1 + e·n/horizon)."""
    out = []
    for kl in kls:
        e = min(max(kl / target - 1, -0.2), 0.2)
        beta *= 1 + e * n / horizon
        out.append(beta)
    return out
