"""`agentrl train --resume` with changed values: one warning line naming the changed keys and
those the checkpoint's weights override (they are not applied; a new lr is)."""

from __future__ import annotations

from pathlib import Path

from agentrl.config import TrainConfig, load_config
from agentrl.trainer import run_dir
from agentrl.trainer.export import write_config


def test_changed_keys_are_named_and_restored_ones_flagged(tmp_path: Path) -> None:
    write_config(load_config(TrainConfig, None, ["optim.lr=2e-4"]), tmp_path)
    same = load_config(TrainConfig, None, ["optim.lr=2e-4", "trainer.steps=99"])
    assert run_dir.resume_changes(tmp_path, same) == []  # more steps: the point of resuming
    assert run_dir.resume_warning([]) is None
    new = load_config(TrainConfig, None, ["optim.lr=0.01", "sampling.temperature=0.5"])
    changed = run_dir.resume_changes(tmp_path, new)
    assert changed == ["optim.lr", "sampling.temperature"]
    line = run_dir.resume_warning(changed)
    assert line is not None and "\n" not in line
    assert "changed config (optim.lr, sampling.temperature)" in line
    # The new lr is applied on resume (`actor.apply_optim_config`): nothing is overridden.
    assert "overrides" not in line
    moved = load_config(TrainConfig, None, ["optim.lr=0.01", "model.path=tiny:llama"])
    line = run_dir.resume_warning(run_dir.resume_changes(tmp_path, moved))
    assert line is not None and "the checkpoint's state overrides model.path " in line
    assert "overrides optim.lr" not in line


def test_no_saved_config_no_warning(tmp_path: Path) -> None:
    assert run_dir.resume_changes(tmp_path, TrainConfig()) == []
