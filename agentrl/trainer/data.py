"""Where prompts come from: env-generated tasks (seeds) or dataset rows (`agentrl.rows`).

The cursor counts prompts consumed, so a resumed run continues with exactly the next prompt.
Dataset rows are read once, here, each checked by the env class's `read_row` (so a bad row
fails, or is skipped and counted, before training starts), then shuffled per epoch.
Held-out evaluation uses the validation split (`data.val_path`) when there is one, else seeds
from `data.eval_seed_offset` up, disjoint from training seeds. A run on dataset rows without a
validation split has no held-out eval: the env's generated tasks are another distribution.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from agentrl.config import DataConfig
from agentrl.rows import Dataset, Row, read_dataset, rows_env


class TaskSource:
    def __init__(self, cfg: DataConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self.train: Dataset | None = None
        self.val: Dataset | None = None
        if cfg.train_paths() or cfg.val_paths():
            from agentrl.envs import load_env_module

            for module in cfg.env_modules:
                load_env_module(module)
            env_cls = rows_env(cfg.env)
            read = partial(
                read_dataset, columns=cfg.columns, check=env_cls.read_row, on_bad_row=cfg.on_bad_row
            )
            self.train = read(cfg.train_paths()) if cfg.train_paths() else None
            self.val = read(cfg.val_paths()) if cfg.val_paths() else None
        self.rows = self.train.rows if self.train is not None else None
        self.cursor = 0

    @property
    def skipped(self) -> int:
        """Bad rows left out (`data.on_bad_row: skip`), training and validation."""
        return sum(d.skipped for d in (self.train, self.val) if d is not None)

    def describe(self) -> list[str]:
        """What the run trains and evaluates on, for the log."""
        lines = []
        if self.train is not None:
            lines.append(f"data: train {self.train.summary()}")
        if self.val is not None:
            n = min(self.cfg.eval_episodes, len(self.val))
            lines.append(f"data: val {self.val.summary()}; held-out eval uses the first {n}")
        elif self.train is not None and self.cfg.eval_episodes > 0:
            lines.append("data: no data.val_path, so no held-out eval on this dataset")
        return lines

    def _item(self, k: int) -> int | Row:
        if self.rows is None:
            return self.seed * 10_000_019 + k
        n = len(self.rows)
        order = np.random.default_rng(self.seed + k // n).permutation(n)
        return self.rows[int(order[k % n])]

    def item_at(self, k: int) -> int | Row:
        """The `k`-th prompt of the run's order (a pipelined trainer issues them one by one)."""
        return self._item(k)

    def next_batch(self, size: int | None = None) -> list[int | Row]:
        size = size or self.cfg.batch_size
        items = [self._item(self.cursor + i) for i in range(size)]
        self.cursor += size
        return items

    def demo_items(self, n: int) -> list[int | Row]:
        """Tasks for oracle SFT demos: the training rows (cycled), else seeds disjoint from
        training and held-out eval."""
        if self.rows is not None:
            return [self.rows[i % len(self.rows)] for i in range(n)]
        return [self.cfg.eval_seed_offset * 2 + i for i in range(n)]

    def eval_items(self, n: int | None = None) -> list[Any]:
        """Held-out tasks: the validation rows, else env seeds (none for a dataset run)."""
        n = n or self.cfg.eval_episodes
        if self.val is not None:
            return list(self.val.rows[:n])
        if self.train is not None:
            return []
        return [self.cfg.eval_seed_offset + i for i in range(n)]
