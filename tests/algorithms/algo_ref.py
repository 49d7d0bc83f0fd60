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
