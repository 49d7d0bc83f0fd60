"""Replay a served session against another checkpoint, offline and token-exact.

`agentrl serve --out` records every segment's exact ids, the engine's log-prob of each sampled
token and the temperature it was sampled at. Replaying that file against a checkpoint (a later
training step, a quantized copy, a merged LoRA) answers "would this checkpoint have done the
same?" without rerunning the agent: one teacher-forced forward of the checkpoint over each
segment's recorded ids (the trainer's own forward, `forward_logits` over a `collate`d row:
never re-tokenized), compared per sampled token (loss mask 1) with what was recorded.

Per segment: mean and max |Δ log-prob|, a k3 estimate of KL(recorded ‖ checkpoint) (the tokens
were sampled from the recorded policy: mean of (r - 1) - log r, r = p_ckpt / p_rec), and the
first divergence: the first sampled token where the checkpoint's greedy choice differs from
the recorded token (`argmax`), or where its probability of the recorded token falls below a
threshold (`prob`: the criterion for sessions sampled at a temperature), mapped back to its
turn, its assistant message and a character offset in the turn's text. Turns sampled under a
grammar (`metadata["constrained_turns"]`) are scored but not checked for divergence: the
recorded tokens were chosen under a mask the unmasked argmax does not see.

A checkpoint whose chat template or vocabulary differs from the recorded one is refused
(`provenance.mismatch`) unless forced; a malformed file is one `ReplayError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentrl.chat.format import ChatFormat
from agentrl.serve.provenance import mismatch
from agentrl.types import Trajectory, TrajectoryGroup, read_jsonl

Criterion = Literal["argmax", "prob"]
ARGMAX_TIE = 1e-4  # nats: a recorded token this close to the checkpoint's best is not a miss
CONTEXT_CHARS = 60  # decoded text kept before a divergence
ROWS = 1024  # sampled positions whose log-softmax is computed at once


class ReplayError(ValueError):
    """A file, segment or checkpoint replay cannot use; the message names the culprit."""


@dataclass
class Divergence:
    """The first sampled token where the checkpoint would have gone another way."""

    position: int  # index in the segment's response_ids
    turn: int  # index in the segment's turns
    message: int  # index of that turn's assistant message in the segment's messages
    char_offset: int  # characters of the turn's text before the token
    recorded_token: int
    recorded_text: str
    checkpoint_token: int  # the checkpoint's greedy choice at that position
    checkpoint_text: str
    recorded_logprob: float
    checkpoint_logprob: float  # the checkpoint's log-prob of the recorded token
    before: str  # the turn's decoded text just before the token


@dataclass
class SegmentReplay:
    session: str  # the episode (run/session) the segment belongs to
    segment: str  # the snapshot key (run/session/segment), else the file position
    turns: int
    sampled: int  # sampled tokens compared
    mean_abs_delta: float
    max_abs_delta: float
    kl_k3: float
    divergence: Divergence | None
    temperatures: list[float]  # per turn, as recorded (0: greedy, whose logprobs are at T=1)
    # per sampled token: position, turn, token, recorded, checkpoint, delta, argmax
    tokens: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Replay:
    file: str
    model: str
    criterion: Criterion
    threshold: float
    segments: list[SegmentReplay]
    notes: list[str] = field(default_factory=list)  # what was assumed or not checked

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_segments(path: str | Path) -> list[Trajectory]:
    """The recorded segments holding sampled tokens (newest line of each), each checked."""
    if not Path(path).is_file():
        raise ReplayError(f"{path}: no such file")
    try:
        trajs = list(read_jsonl(path))
    except ValueError as e:
        raise ReplayError(str(e)) from None
    except UnicodeDecodeError as e:
        raise ReplayError(f"{path}: not a UTF-8 JSONL file ({e.reason})") from None
    for i, t in enumerate(trajs):
        t.metadata.setdefault("snapshot", f"#{i}")  # a name in errors and reports
        try:
            t.validate()
        except ValueError as e:
            raise ReplayError(f"{path}: segment {_name(t, i)}: {e}") from None
    out = [t for t in trajs if any(t.loss_mask)]
    if not out:
        raise ReplayError(f"{path}: no recorded segment holds a sampled token")
    return out


def check_template(
    path: str | Path, segments: Sequence[Trajectory], chat: ChatFormat
) -> tuple[int, str | None]:
    """(how many segments record a template or vocabulary hash, the first mismatch with
    `chat`'s as one line naming its segment, or None)."""
    seen: dict[tuple[Any, Any], str | None] = {}
    checked, first = 0, None
    for i, t in enumerate(segments):
        key = (t.metadata.get("chat_template_sha256"), t.metadata.get("vocab_sha256"))
        checked += any(isinstance(k, str) for k in key)
        if key not in seen:
            seen[key] = mismatch(t.metadata, chat)
        if seen[key] and first is None:
            first = f"{path}: segment {_name(t, i)}: {seen[key]}"
    return checked, first


def replay_file(
    path: str | Path,
    model: Any,
    chat: ChatFormat,
    *,
    model_name: str = "",
    criterion: Criterion = "argmax",
    threshold: float = 1e-3,
    force: bool = False,
    default_temperature: float = 1.0,
    keep_tokens: bool = True,
) -> Replay:
    """Replay every segment of `path` against `model` (a causal LM, eval mode) whose tokenizer
    and template are `chat`'s. `default_temperature`: for turns the file records none of."""
    if criterion not in ("argmax", "prob"):
        raise ReplayError(f"criterion must be argmax or prob, got {criterion!r}")
    if criterion == "prob" and not 0.0 < threshold < 1.0:
        raise ReplayError(f"threshold must be in (0, 1), got {threshold}")
    segments = load_segments(path)
    notes: list[str] = []
    checked, problem = check_template(path, segments, chat)
    if problem and not force:
        raise ReplayError(f"{problem} (--force to replay)")
    if problem:
        notes.append(f"forced: {problem}")
    if checked < len(segments):
        notes.append(
            f"{len(segments) - checked} segment(s) record no template or vocabulary hash: "
            "not checked"
        )
    vocab = _vocab_rows(model)
    for i, t in enumerate(segments):
        top = max(t.input_ids, default=0)
        if vocab and top >= vocab:
            raise ReplayError(
                f"{path}: segment {_name(t, i)}: token id {top} is outside the checkpoint's "
                f"vocabulary ({vocab} rows)"
            )
    results = []
    assumed = 0
    for i, t in enumerate(segments):
        temps, missing = _temperatures(t, default_temperature)
        assumed += missing
        results.append(replay_segment(t, model, chat, temps, criterion, threshold, i, keep_tokens))
    if assumed:
        notes.append(f"{assumed} turn(s) record no temperature: replayed at {default_temperature}")
    return Replay(str(path), model_name, criterion, threshold, results, notes)


def replay_segment(
    traj: Trajectory,
    model: Any,
    chat: ChatFormat,
    temperatures: list[float],
    criterion: Criterion = "argmax",
    threshold: float = 1e-3,
    index: int = 0,
    keep_tokens: bool = True,
) -> SegmentReplay:
    """One teacher-forced forward over `traj`'s recorded ids; `temperatures` per turn."""
    import torch

    from agentrl.trainer.batch import collate
    from agentrl.trainer.logprobs import forward_logits

    batch = collate([TrajectoryGroup("replay", [traj])], pad_id=0)
    device = next(model.parameters()).device
    sampled = [j for j, m in enumerate(traj.loss_mask) if m]
    turn_of = _turn_of(traj)
    temp = [max(temperatures[turn_of[j]], 0.0) or 1.0 for j in sampled]
    lps, bests, picks = [], [], []
    with torch.no_grad():
        logits = forward_logits(model, batch.to(device))[0]  # [T, V] over the response
        for a in range(0, len(sampled), ROWS):  # no [sampled, V] float32 copy at once
            at = torch.tensor(sampled[a : a + ROWS], device=logits.device)
            scale = torch.tensor(temp[a : a + ROWS], device=logits.device)[:, None]
            logp = torch.log_softmax(logits[at].float() / scale, dim=-1)
            tokens = batch.responses[0, at.cpu()].to(logits.device)
            lps.append(logp.gather(-1, tokens[:, None]).squeeze(-1).cpu())
            top = logp.max(-1)
            bests.append(top.values.cpu())
            picks.append(top.indices.cpu())
    lp_ckpt = torch.cat(lps).double()
    best = torch.cat(bests)
    argmax = torch.cat(picks).tolist()
    lp_rec = torch.tensor([traj.logprobs[j] for j in sampled], dtype=torch.float64)
    delta = lp_ckpt - lp_rec
    log_r = delta.clamp(max=50.0)
    k3 = (log_r.exp() - 1.0 - log_r).mean().item()
    constrained = {int(k) for k in traj.metadata.get("constrained_turns", {})}
    miss = None
    for n, j in enumerate(sampled):
        if turn_of[j] in constrained:
            continue
        if criterion == "argmax":
            hit = float(best[n]) - float(lp_ckpt[n]) > ARGMAX_TIE
        else:
            hit = math.exp(float(lp_ckpt[n])) < threshold
        if hit:
            miss = n
            break
    div = None
    if miss is not None:
        j = sampled[miss]
        div = _divergence(traj, chat, j, turn_of[j], argmax[miss], lp_rec[miss], lp_ckpt[miss])
    abs_d = delta.abs()
    kept = (
        [
            {
                "position": j,
                "turn": turn_of[j],
                "token": traj.response_ids[j],
                "recorded": float(lp_rec[n]),
                "checkpoint": float(lp_ckpt[n]),
                "delta": float(delta[n]),
                "argmax": argmax[n],
            }
            for n, j in enumerate(sampled)
        ]
        if keep_tokens
        else []
    )
    return SegmentReplay(
        session=str(traj.metadata.get("episode") or traj.metadata.get("session") or traj.group_id),
        segment=_name(traj, index),
        turns=len(traj.turns),
        sampled=len(sampled),
        mean_abs_delta=float(abs_d.mean()),
        max_abs_delta=float(abs_d.max()),
        kl_k3=float(k3),
        divergence=div,
        temperatures=list(temperatures),
        tokens=kept,
    )


def _divergence(
    traj: Trajectory, chat: ChatFormat, j: int, k: int, best: int, lp_rec: Any, lp_ckpt: Any
) -> Divergence:
    turn = traj.turns[k]
    before = chat.decode(traj.response_ids[turn.start : j])
    return Divergence(
        position=j,
        turn=k,
        message=_message_index(traj, k),
        char_offset=len(before),
        recorded_token=traj.response_ids[j],
        recorded_text=chat.decode([traj.response_ids[j]]),
        checkpoint_token=best,
        checkpoint_text=chat.decode([best]),
        recorded_logprob=float(lp_rec),
        checkpoint_logprob=float(lp_ckpt),
        before=before[-CONTEXT_CHARS:],
    )


def _turn_of(traj: Trajectory) -> dict[int, int]:
    """Response position → turn index, for every sampled token (a file without turns: 0)."""
    out = {j: k for k, t in enumerate(traj.turns) for j in range(t.start, t.end)}
    for j, m in enumerate(traj.loss_mask):
        if m:
            out.setdefault(j, 0)
    return out


def _temperatures(traj: Trajectory, default: float) -> tuple[list[float], int]:
    """The temperature each turn's logprobs are of, and how many turns recorded none."""
    info = traj.metadata.get("turn_sampling") or []
    n = max(len(traj.turns), 1)
    out, missing = [], 0
    for k in range(n):
        t = info[k].get("temperature") if k < len(info) and isinstance(info[k], dict) else None
        if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
            out.append(float(t))
        else:
            out.append(default)
            missing += 1
    return out, missing


def _message_index(traj: Trajectory, k: int) -> int:
    """Index in `traj.messages` of turn `k`'s assistant message: recorded by the server;
    for an older file, turns are the last assistant messages, in order."""
    info = traj.metadata.get("turn_sampling") or []
    if k < len(info) and isinstance(info[k], dict) and isinstance(info[k].get("message"), int):
        return int(info[k]["message"])
    mine = [i for i, m in enumerate(traj.messages) if m.role == "assistant"]
    mine = mine[len(mine) - len(traj.turns) :] if len(mine) >= len(traj.turns) else []
    return mine[k] if k < len(mine) else -1


def _vocab_rows(model: Any) -> int:
    emb = model.get_input_embeddings()
    return int(emb.weight.shape[0]) if emb is not None else 0


def _name(t: Trajectory, index: int) -> str:
    snap = t.metadata.get("snapshot")
    return snap if isinstance(snap, str) and snap else f"#{index}"
