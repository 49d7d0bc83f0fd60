"""Load math datasets in verl's row format from parquet or JSONL.

A row needs `prompt` (a string, or a list of `{role, content}` chat messages) and
`reward_model: {ground_truth: ...}`; other columns (`data_source`, `extra_info`) are kept as
info. Every row is checked at load time and a bad one raises naming its row number, so a
broken dataset fails before training starts rather than as a zero reward mid-run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.types import Message

_ROLES = ("system", "user", "assistant")


@dataclass
class MathRow:
    """One validated problem."""

    messages: list[Message]
    ground_truth: str
    extra: dict[str, Any] = field(default_factory=dict)


def _read_rows(path: Path) -> list[Any]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix in (".jsonl", ".json"):
        rows = []
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: row {i}: invalid JSON: {e}") from e
        return rows
    raise ValueError(f"{path}: unsupported dataset format (use .parquet or .jsonl)")


def parse_row(row: Any) -> MathRow:
    """Validate one verl-style row; raises ValueError saying what is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"row must be an object, got {type(row).__name__}")
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        messages = [Message("user", prompt)]
    elif isinstance(prompt, list) and prompt:
        messages = []
        for m in prompt:
            if not isinstance(m, dict) or m.get("role") not in _ROLES:
                raise ValueError(f"prompt message needs role in {_ROLES}: {m!r:.80}")
            if not isinstance(m.get("content"), str):
                raise ValueError(f"prompt message content must be a string: {m!r:.80}")
            messages.append(Message(m["role"], m["content"]))
    else:
        raise ValueError("'prompt' must be a non-empty string or list of chat messages")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ValueError("missing 'reward_model': {'ground_truth': ...}")
    gold = reward_model["ground_truth"]
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)) or str(gold) == "":
        raise ValueError(f"ground_truth must be a non-empty string or number, got {gold!r:.80}")
    extra = {k: v for k, v in row.items() if k not in ("prompt", "reward_model")}
    return MathRow(messages, str(gold), extra)


def load_math_dataset(path: str | Path) -> list[MathRow]:
    """All rows of a parquet/JSONL file, validated; errors name the 0-based row number."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"math dataset not found: {path}")
    rows = []
    for i, row in enumerate(_read_rows(path)):
        try:
            rows.append(parse_row(row))
        except ValueError as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
    if not rows:
        raise ValueError(f"{path}: dataset is empty")
    return rows
