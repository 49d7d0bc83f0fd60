"""Checkpoints: model, optimizer, scheduler, RNG, data cursor and step, written atomically.

A checkpoint directory is complete or absent: it is written under a temporary name and renamed,
and `latest` is replaced by rename too, so a SIGKILL at any moment leaves the previous
checkpoint loadable and `--resume` neither repeats nor skips a step.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    def __init__(self, out_dir: Path, keep: int = 2) -> None:
        self.root = out_dir / "checkpoints"
        self.keep = keep

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / "state.pt").exists() else None

    def save(
        self, step: int, state: dict[str, Any], extra: Callable[[Path], Any] | None = None
    ) -> Path:
        """Write `state` (and whatever `extra(dir)` adds, e.g. an HF export) atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step_{step:06d}"
        tmp = self.root / f".tmp_step_{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save({**state, "rng": rng_state(), "step": step}, tmp / "state.pt")
        if extra is not None:
            extra(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointer_tmp = self.root / "latest.tmp"
        pointer_tmp.write_text(final.name)
        os.replace(pointer_tmp, self.root / "latest")
        self._prune()
        return final

    def load(self, path: Path | None = None) -> dict[str, Any] | None:
        path = path or self.latest()
        if path is None:
            return None
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
        set_rng_state(state["rng"])
        return state

    def _prune(self) -> None:
        steps = sorted(p for p in self.root.glob("step_*") if p.is_dir())
        for old in steps[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
