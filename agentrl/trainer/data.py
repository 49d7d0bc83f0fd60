"""Where prompts come from: env-generated tasks (seeds) or a parquet/JSONL dataset (rows).

The cursor counts prompts consumed, so a resumed run continues with exactly the next prompt.
Held-out evaluation uses seeds from `data.eval_seed_offset` up, disjoint from training seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.config import DataConfig


def load_rows(path: str, prompt_key: str) -> list[dict[str, Any]]:
    """Rows of a parquet or JSONL file; a row without `prompt_key` fails naming its number."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(p).to_pylist()
    else:
        rows = []
        with open(p, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: row {i}: not valid JSON ({e.msg})") from e
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or prompt_key not in row:
            raise ValueError(f"{path}: row {i}: missing column {prompt_key!r}")
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


class TaskSource:
    def __init__(self, cfg: DataConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self.rows = load_rows(cfg.path, cfg.prompt_key) if cfg.path else None
        self.cursor = 0

    def _item(self, k: int) -> int | dict[str, Any]:
        if self.rows is None:
            return self.seed * 10_000_019 + k
        n = len(self.rows)
        order = np.random.default_rng(self.seed + k // n).permutation(n)
        return self.rows[int(order[k % n])]

    def next_batch(self, size: int | None = None) -> list[int | dict[str, Any]]:
        size = size or self.cfg.batch_size
        items = [self._item(self.cursor + i) for i in range(size)]
        self.cursor += size
        return items

    def eval_items(self, n: int | None = None) -> list[int]:
        return [self.cfg.eval_seed_offset + i for i in range(n or self.cfg.eval_episodes)]
