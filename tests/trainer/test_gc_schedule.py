"""`trainer.gc_every` (agentrl/trainer/gc_control.py): full collections at step boundaries,
the survivors frozen in between, nothing held past the next boundary, and the run leaves
Python's collector as it found it."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import pytest
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import ConfigError, TrainConfig, load_config
from agentrl.trainer.gc_control import GcSchedule

pytestmark = pytest.mark.timeout(300)


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_due_after_the_first_step_and_every_n() -> None:
    s = GcSchedule(50)
    assert [n for n in range(1, 151) if s.due(n)] == [1, 50, 100, 150]
    assert not any(GcSchedule(0).due(n) for n in range(1, 200))
    with pytest.raises(ValueError, match="gc_every"):
        GcSchedule(-1)


def test_frozen_garbage_is_collected_at_the_next_boundary() -> None:
    s = GcSchedule(3)
    try:
        node = _Node()
        alive = weakref.ref(node)
        assert s.after_step(1) is not None and gc.get_freeze_count() > 0
        del node  # garbage now, but frozen: the automatic passes skip it
        gc.collect()
        assert alive() is not None
        assert s.after_step(2) is None  # not a boundary: nothing done
        assert alive() is not None
        assert s.after_step(3) is not None  # the next boundary's full collection frees it
        assert alive() is None
    finally:
        s.close()
    assert gc.get_freeze_count() == 0


def test_the_first_boundary_does_not_walk_the_old_generation() -> None:
    """The first boundary only collects the young generations before freezing (a full walk
    there costs seconds in a long-lived process): garbage already old waits, frozen, for
    the next boundary's full collection."""
    s = GcSchedule(2)
    try:
        node = _Node()
        alive = weakref.ref(node)
        gc.collect()  # node survives: it is in the oldest generation now
        del node
        s.after_step(1)
        assert alive() is not None
        s.after_step(2)
        assert alive() is None
    finally:
        s.close()


def test_zero_leaves_the_collector_alone() -> None:
    s = GcSchedule(0)
    assert s.after_step(1) is None and gc.get_freeze_count() == 0
    s.close()


def test_a_negative_value_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gc_every"):
        load_config(TrainConfig, None, train_overrides(tmp_path, tmp_path, trainer__gc_every=-2))


def test_a_run_collects_after_its_first_step_and_unfreezes_at_the_end(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    overrides = train_overrides(
        tiny_model_dir.parent, tmp_path, trainer__steps=3, trainer__gc_every=2,
        data__eval_episodes=0,
    )  # fmt: skip
    build_trainer(load_config(TrainConfig, None, overrides)).train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in rows if "time/update" in r}
    assert sorted(steps) == [1, 2, 3]
    assert [("time/gc" in steps[n]) for n in (1, 2, 3)] == [True, True, False]
    assert gc.get_freeze_count() == 0
