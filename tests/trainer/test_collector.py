"""How a step's groups are gathered is a component (`agentrl.trainer.collect.Collector`).

- A third collector, defined here, runs a real training run through the unchanged `Trainer`:
  its groups are trained, its metrics logged, its state checkpointed and given back on
  `--resume`, and it is started once and closed.
- `trainer.py` names no collection mode (no async/pipeline/staleness/version identifiers),
  and outside config validation only the wiring room reads `trainer.async`.
- The two built-in collectors keep the resume contract: a pipelined checkpoint's pending
  prompts are re-issued first by the pipelined collector, or rewind the synchronous one's
  cursor to the oldest of them.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from trainer_synth import train_overrides

from agentrl.assembly import build_collector, place
from agentrl.config import TrainConfig, load_config
from agentrl.report.progress import RunProgress
from agentrl.trainer import Components, Trainer
from agentrl.trainer.batch import TrainBatch
from agentrl.trainer.collect import Collector, SyncCollector
from agentrl.trainer.pipeline import PipelinedCollector
from agentrl.types import TrajectoryGroup

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


def _cfg(cache: Path, out: Path, **extra: object) -> TrainConfig:
    base: dict[str, object] = {"data__eval_episodes": 0, "algorithm__entropy_coef": 0.05}
    return load_config(TrainConfig, None, train_overrides(cache, out, **(base | extra)))


class FixedPromptsCollector:
    """A collector the `Trainer` has never heard of: every step rolls out the same prompts
    (a fixed curriculum), and it checkpoints how many batches it served."""

    notes: Sequence[str] = ("fixed prompts: every step trains on prompts 0 and 1",)

    def __init__(self, c: Components, n: int) -> None:
        self.c, self.n = c, n
        self.served = 0
        self.calls: list[tuple[str, Any]] = []
        self._stats: dict[str, float] = {}

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def start(self, step: int) -> None:
        self.calls.append(("start", step))

    def next_batch(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        items = [self.c.data.item_at(0), self.c.data.item_at(1)]
        groups = self.c.rollout.collect(items, self.n)
        self._stats = dict(self.c.rollout.stats)
        self.c.scorer.shape(groups)
        self.served += 1
        self.calls.append(("next_batch", step))
        return groups

    def lag_metrics(self, batch: TrainBatch) -> dict[str, float]:
        return {"fixed/rows": float(batch.size)}

    def metrics(
        self, step: int, groups: Sequence[TrajectoryGroup], update_spread: dict[str, float]
    ) -> dict[str, float]:
        return {"fixed/batches": float(self.served)}

    def state(self) -> dict[str, Any]:
        return {"fixed_served": self.served}

    def load_state(self, state: dict[str, Any]) -> None:
        self.served = state["fixed_served"]
        self.calls.append(("load_state", self.served))

    def close(self) -> None:
        self.calls.append(("close", None))


def _fixed(cfg: TrainConfig) -> tuple[Trainer, FixedPromptsCollector]:
    components = place(cfg)
    collector = FixedPromptsCollector(components, cfg.rollout.n)
    plugged: Collector = collector  # the Protocol is all the Trainer asks for
    return Trainer(cfg, components, plugged), collector


def test_a_third_collector_plugs_in_without_touching_the_trainer(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = _cfg(tiny_model_dir.parent, tmp_path, trainer__steps=2, trainer__save_every=1)
    trainer, collector = _fixed(cfg)
    trainer.train()
    assert collector.calls[:3] == [("start", 0), ("next_batch", 1), ("next_batch", 2)]
    assert collector.calls[3:] and {c for c, _ in collector.calls[3:]} == {"close"}
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["fixed/batches"], r["fixed/rows"]) for r in rows] == [
        (1, 1.0, 4.0),
        (2, 2.0, 4.0),
    ]
    assert all(r["groups"] == 2 and r["data/cursor"] == 0 for r in rows)  # never read data
    assert not any(k.startswith("async/") for r in rows for k in r)
    state = torch.load(tmp_path / "checkpoints" / "step_000002" / "state.pt", weights_only=False)
    assert state["fixed_served"] == 2 and "async_pending" not in state

    cfg.trainer.steps = 3  # resume: the checkpoint's state comes back before `start`
    trainer, collector = _fixed(cfg)
    trainer.train(resume=True)
    assert collector.calls[:3] == [("load_state", 2), ("start", 2), ("next_batch", 3)]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["fixed/batches"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_resume_contract_of_the_built_in_collectors(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A pipelined checkpoint (`async_pending`, `async_inflight`): the pipelined collector
    keeps those prompts pending, and what their episodes had done, until it issues them; the
    synchronous one rewinds the cursor to the oldest and says the episodes run again."""
    cfg = _cfg(tiny_model_dir.parent, tmp_path, trainer__async__max_staleness=1)
    c = place(cfg)
    try:
        pipelined = build_collector(cfg, c)
        assert isinstance(pipelined, PipelinedCollector)
        kept = {5: {"issued_at": 1, "episodes": [None, None]}}  # not issued again yet
        pipelined.load_state({"async_pending": [5, 3], "async_inflight": kept})
        assert pipelined.state() == {
            "async_pending": [3, 5],
            "async_stale_counts": {"dropped_groups": 0.0, "refilled_groups": 0.0},
            "async_inflight": kept,
            "async_resume_counts": dict.fromkeys(
                ("kept", "continued", "reissued", "restarted", "snapshot_errors"), 0.0
            ),
        }
        # 2 x 2 x (K + 1) = 8 episodes issued: all run at once; the resume says what it keeps
        (note,) = pipelined.notes
        assert note.startswith("resume: 1 groups were in flight") and "2 started again" in note
        with pytest.raises(RuntimeError, match="before start"):
            pipelined.next_batch(1, RunProgress(Console(), enabled=False))

        cfg.trainer.async_.max_staleness = 0
        sync = build_collector(cfg, c)
        assert isinstance(sync, SyncCollector)
        c.data.cursor = 8
        sync.load_state({"async_pending": [5, 3], "async_inflight": kept})
        sync.start(2)
        assert c.data.cursor == 3 and sync.state() == {}
        assert sync.notes and "run again from their seed" in sync.notes[0]
        cfg.rollout.concurrency = 3  # fewer than the 8 episodes K = 1 keeps issued
        cfg.trainer.async_.max_staleness = 1
        (note,) = build_collector(cfg, c).notes
        assert "rollout.concurrency=3" in note and "raise both to 8" in note
    finally:
        c.close()


# ---------------------------------------------------------------- the trainer names no mode
MODE_WORDS = ("async", "pipeline", "staleness", "version", "pending", "producer")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def test_trainer_has_no_reference_to_a_collection_mode() -> None:
    """`trainer.py` gets its collector and calls it; no name, attribute, import or string
    (docstrings aside) of the module mentions a mode."""
    tree = ast.parse((REPO / "agentrl" / "trainer" / "trainer.py").read_text())
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            words = [getattr(node, "module", None) or "", *(a.name for a in node.names)]
        elif isinstance(node, (ast.FunctionDef, ast.arg, ast.keyword)):
            words = [getattr(node, "name", None) or getattr(node, "arg", None) or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = [] if id(node) in docs else [node.value]
        found += [w for w in words if any(m in w.lower() for m in MODE_WORDS)]
    assert not found, f"trainer.py names a collection mode: {found}"


# Modules outside config/ and assembly/ that may read `cfg.trainer.async_`, and why.
ASYNC_READERS = {
    "agentrl/doctor/stack.py": "`agentrl doctor` checks a config against the installed stack "
    "(a vLLM server must support /pause for a pipelined run): a config check, without torch",
}


def test_only_the_wiring_room_reads_trainer_async() -> None:
    bad = []
    for path in sorted((REPO / "agentrl").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("agentrl/config/", "agentrl/assembly/")) or rel in ASYNC_READERS:
            continue
        if path.is_symlink() or any(p.is_symlink() for p in path.parents):
            continue  # agentrl/envs etc. in a worktree: not the core
        tree = ast.parse(path.read_text())
        bad += [
            f"{rel}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "async_"
        ]
    assert not bad, f"read trainer.async in agentrl/assembly/ instead: {bad}"
