"""Turn trajectories into the compact JSON records the viewer page renders.

The page never re-derives anything: every colour it paints comes from a field computed here
from the trajectory itself (the loss mask, the engine's logprobs, the trainer's logprobs), so
what you see is exactly what the trainer consumed. Token text is decoded one id at a time,
which is the only decoding that shows token boundaries (byte-level pieces of a multi-byte
character show as U+FFFD; the id is always in the tooltip).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from agentrl.types import Trajectory

# Metadata keys that may name the tokenizer the episode was sampled with, most specific first.
TOKENIZER_KEYS = ("tokenizer", "tokenizer_path", "model_path", "model")
# Large per-token metadata that is shown as token colours, not in the metadata box.
_PER_TOKEN_KEYS = {"trainer_logprobs", "tools"}
_B64 = re.compile(r"^[A-Za-z0-9+/=\s]+$")
_MAX_TEXT = 20_000  # chars of one message/tool result kept in the page

Decoder = Callable[[Sequence[int]], list[str] | None]


def tokenizer_hint(trajectories: Sequence[Trajectory]) -> str | None:
    """The tokenizer path recorded in the first trajectory's metadata, if any."""
    for t in trajectories[:1]:
        for key in TOKENIZER_KEYS:
            value = t.metadata.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def load_tokenizer(path: str, cache_dir: str | None = None) -> Any:
    """A HF tokenizer from a checkpoint dir or `tiny:<preset>` (built locally, never fetched)."""
    from transformers import AutoTokenizer

    from agentrl.models.tiny import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(path, cache_dir))


def make_decoder(tokenizer: Any | None) -> Decoder:
    """Per-token decoding with a cache (vocabularies are small, episodes repeat tokens)."""
    if tokenizer is None:
        return lambda ids: None
    cache: dict[int, str] = {}

    def decode(ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            if i not in cache:
                cache[i] = tokenizer.decode([i], skip_special_tokens=False)
            out.append(cache[i])
        return out

    return decode


def episode_errors(t: Trajectory) -> list[str]:
    """Human-readable problems in one episode: env/engine errors, bad calls, failed tools."""
    errors = []
    if t.metadata.get("error"):
        errors.append(f"{t.termination}: {t.metadata['error']}")
    elif t.infra_failed:
        errors.append(t.termination)
    if t.metadata.get("left_out"):  # the trainer did not train on it (`trainer.exclusion`)
        errors.append(f"left out of training ({t.metadata['left_out']})")
    for k, turn in enumerate(t.turns):
        for c in turn.tool_calls:
            if c.parse_error:
                errors.append(f"turn {k}: unparsable tool call: {c.parse_error}")
        for r in turn.tool_results:
            if r.is_error:
                errors.append(f"turn {k}: tool {r.name} failed: {r.content[:200]}")
    return errors


def _image_uri(item: Any) -> tuple[str, int | None] | None:
    """`multimodal['images']` entries: base64 PNG strings, data URIs, or {data, turn} dicts."""
    turn = None
    if isinstance(item, dict):
        turn = item.get("turn")
        item = item.get("data") or item.get("b64") or item.get("png")
    if not isinstance(item, str):
        return None
    if item.startswith("data:image/"):
        head, _, body = item.partition(",")
        ok = ";base64" in head and _B64.match(body)
        return (item, turn) if ok else None
    return (f"data:image/png;base64,{item}", turn) if _B64.match(item) else None


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"… [{len(text)} chars]"


def _turns(t: Trajectory) -> list[dict[str, Any]]:
    if not t.turns:  # single-shot data without turn records: one pseudo-turn
        n = len(t.response_ids)
        return [{"start": 0, "end": n, "obs_end": n, "reward": t.reward, "finish": ""}]
    return [
        {
            "start": u.start,
            "end": u.end,
            "obs_end": u.obs_end,
            "reward": u.reward,
            "finish": u.finish_reason,
            "calls": [
                {
                    "name": c.name,
                    "args": json.dumps(c.arguments, ensure_ascii=False),
                    "id": c.id,
                    "parse_error": c.parse_error,
                }
                for c in u.tool_calls
            ],
            "results": [
                {
                    "name": r.name,
                    "content": _clip(r.content),
                    "is_error": r.is_error,
                    "truncated": r.truncated,
                    "wall_s": round(r.wall_s, 4),
                }
                for r in u.tool_results
            ],
        }
        for u in t.turns
    ]


def _small_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in meta.items():
        if k in _PER_TOKEN_KEYS:
            continue
        text = json.dumps(v, ensure_ascii=False, default=str)
        out[k] = v if len(text) <= 500 else text[:500] + "…"
    return out


def episode_record(t: Trajectory, index: int, decode: Decoder) -> dict[str, Any]:
    """Everything the page shows for one episode, as plain JSON."""
    tlp = t.metadata.get("trainer_logprobs")
    if not (isinstance(tlp, list) and len(tlp) == len(t.response_ids)):
        tlp = None
    images = [u for u in map(_image_uri, t.multimodal.get("images", []) or []) if u]
    errors = episode_errors(t)
    return {
        "i": index,
        "env": t.env_id,
        "group": t.group_id,
        "reward": t.reward,
        "term": t.termination,
        "errors": errors,
        "prompt": {"ids": t.prompt_ids, "text": decode(t.prompt_ids)},
        "resp": {
            "ids": t.response_ids,
            "text": decode(t.response_ids),
            "mask": t.loss_mask,
            "lp": [round(x, 5) for x in t.logprobs],
            "tlp": [round(float(x), 5) for x in tlp] if tlp is not None else None,
            # The policy version that sampled each token (trainer.async); None when unrecorded.
            "ver": _versions(t),
        },
        # The versions the episode spans and where an update landed mid-episode (or None).
        "versions": version_span(t),
        "turns": _turns(t),
        "images": [{"src": src, "turn": turn} for src, turn in images],
        "messages": [
            {
                "role": m.role,
                "content": _clip(m.content),
                "calls": [c.name for c in m.tool_calls],
            }
            for m in t.messages
        ],
        "meta": _small_metadata(t.metadata),
        # served sessions: how many segments the harness split its episode into
        "split": _split(t),
    }


def _versions(t: Trajectory) -> list[int] | None:
    ok = len(t.weight_versions) == len(t.response_ids) and any(v >= 0 for v in t.weight_versions)
    return list(t.weight_versions) if ok else None


def version_span(t: Trajectory) -> dict[str, Any] | None:
    """Which policy versions sampled the episode's tokens: `lo`/`hi` (oldest and newest),
    every distinct `list`ed version, and one `updates` entry per point where the sampling
    version changed between consecutive sampled tokens (response token index, turn, from, to),
    i.e. where a weight update landed while the episode was in flight. None when unrecorded."""
    versions = _versions(t)
    if versions is None:
        return None
    sampled = [(k, v) for k, v in enumerate(versions) if v >= 0]
    updates = []
    for (_, prev), (k, v) in zip(sampled, sampled[1:], strict=False):
        if v != prev:
            turn = next((i for i, u in enumerate(t.turns) if u.start <= k < u.obs_end), 0)
            updates.append({"token": k, "turn": turn, "from": prev, "to": v})
    seen = sorted({v for _, v in sampled})
    return {"lo": seen[0], "hi": seen[-1], "list": seen, "updates": updates}


def _split(t: Trajectory) -> int:
    n = t.metadata.get("episode_segments")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Header numbers: counts, mean reward, trained/env token totals, error and drift counts."""
    n = len(records)
    trained = sum(sum(r["resp"]["mask"]) for r in records)
    total = sum(len(r["resp"]["mask"]) for r in records)
    return {
        "episodes": n,
        "mean_reward": (sum(r["reward"] for r in records) / n) if n else 0.0,
        "trained_tokens": trained,
        "env_tokens": total - trained,
        "with_errors": sum(bool(r["errors"]) for r in records),
        "drifted": sum(1 for r in records if r.get("diff", {}).get("status") == "drift"),
        # episodes a weight update landed in (sampled by more than one policy version)
        "mixed_versions": sum(1 for r in records if (r.get("versions") or {}).get("updates")),
        "versioned": sum(1 for r in records if r.get("versions")),
        "split_episodes": len(
            {r["meta"].get("episode", r["i"]) for r in records if r.get("split", 1) > 1}
        ),
    }
