"""`harbor:family/files-v0`: generated Harbor task folders, split train/held-out. Generation is
deterministic, the splits never share an oracle command, the trainer's eval seeds pose
held-out tasks and its training and demo seeds training tasks, and on real sandboxes (local
bubblewrap) the oracle scores 1, a no-op and a wrong answer 0, on every kind in both splits."""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

import pytest

import agentrl.envs as envs
from agentrl.config import DataConfig
from agentrl.envs.harbor import family
from agentrl.envs.harbor.tasks import load_tasks
from agentrl.trainer.data import TaskSource
from agentrl.types import Message, ToolCall


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))


def _local_reason() -> str | None:
    if os.geteuid() != 0:
        return "local sandbox needs root"
    return None if shutil.which("bwrap") else "bubblewrap not installed"


def _seeds_covering_every_kind(split: str) -> list[int]:
    seeds: dict[str, int] = {}
    for s in range(200):
        seeds.setdefault(family.generate(s, split).kind, s)
    assert sorted(seeds) == sorted(family.KINDS), seeds
    return sorted(seeds.values())


def test_generation_is_deterministic(tmp_path: Path) -> None:
    for split in family.SPLITS:
        for seed in range(20):
            assert family.generate(seed, split) == family.generate(seed, split)
    a = family.write_split(tmp_path / "a", "heldout", 12)
    b = family.write_split(tmp_path / "b", "heldout", 12)
    assert [p.name for p in a] == [p.name for p in b]
    cmp = filecmp.dircmp(tmp_path / "a", tmp_path / "b")
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files
    for sub in cmp.subdirs.values():
        assert not sub.diff_files and not sub.left_only and not sub.right_only


def test_train_and_heldout_never_share_a_command_and_vary_within() -> None:
    train = [family.generate(s, "train") for s in range(400)]
    held = [family.generate(s, "heldout") for s in range(400)]
    assert {t.split for t in train} == {"train"} and {t.split for t in held} == {"heldout"}
    train_cmds, held_cmds = {t.command for t in train}, {t.command for t in held}
    assert not train_cmds & held_cmds
    assert not {t.name for t in train} & {t.name for t in held}
    # no one command solves most tasks: many distinct commands in each split, every kind
    assert len(train_cmds) > 150 and len(held_cmds) > 80
    assert {t.kind for t in held} == set(family.KINDS)


def test_the_trainers_eval_seeds_pose_heldout_tasks_and_its_train_and_demo_seeds_train() -> None:
    env = envs.make("harbor:family/files-v0")
    source = TaskSource(DataConfig(env="harbor:family/files-v0", eval_episodes=4), seed=0)
    for items, split in (
        (source.eval_items(), "heldout"),
        (source.next_batch(4), "train"),
        (source.demo_items(4), "train"),
        (TaskSource(DataConfig(), seed=3).next_batch(4), "train"),
    ):
        for seed in items:
            assert isinstance(seed, int)
            _, info = env.reset(seed=seed)
            assert info["split"] == split, (seed, info)
    forced = envs.make("harbor:family/files-v0", split="heldout")
    assert forced.reset(seed=0)[1]["split"] == "heldout"
    with pytest.raises(ValueError, match="split"):
        envs.make("harbor:family/files-v0", split="test")
    with pytest.raises(ValueError, match="task family"):
        envs.make("harbor:bundled", split="train")
    with pytest.raises(KeyError, match="family/files-v0"):
        envs.make("harbor:family/nope")


@pytest.mark.parametrize("split", family.SPLITS)
def test_oracle_scores_1_and_no_op_and_wrong_answer_0(split: str) -> None:
    if _local_reason():
        pytest.skip(_local_reason() or "")
    env = envs.make("harbor:family/files-v0", split=split)
    try:
        for seed in _seeds_covering_every_kind(split):
            obs, info = env.reset(seed=seed)
            assert info["split"] == split and "/app" not in obs.messages[0].content
            action = env.oracle_action()
            assert action is not None and action.tool_calls
            command = action.tool_calls[0].arguments["command"]
            assert "\n" not in command and not command.startswith("#!")  # one short command
            env.step(action)
            _, reward, done, _, vinfo = env.step(Message("assistant", "Done."))
            assert done and reward == 1.0, (seed, command, vinfo, env.last_verdict)

            env.reset(seed=seed)
            _, reward, done, _, vinfo = env.step(Message("assistant", "Done."))
            assert done and reward == 0.0 and "error" not in vinfo, vinfo

            # the right command on the wrong file, or a wrong number, earns nothing
            env.reset(seed=seed)
            task = family.generate(seed, split)
            out = command.split()[-1]
            bad = f"echo 999 > {out}" if task.kind != "lower" else f"cp {command.split()[1]} {out}"
            call = ToolCall("bash", {"command": bad}, id="c")
            env.step(Message("assistant", "", tool_calls=[call]))
            _, reward, done, _, _ = env.step(Message("assistant", "Done."))
            assert done and reward == 0.0, (seed, bad)
    finally:
        env.close()


def test_written_folders_are_a_harbor_dataset(tmp_path: Path) -> None:
    """`python -m agentrl.envs.harbor.family DIR` writes folders `harbor:DIR` reads back."""
    assert family.main([str(tmp_path / "ds"), "--split", "heldout", "-n", "6"]) == 0
    tasks = load_tasks(tmp_path / "ds")
    assert len(tasks) == 6
    for task in tasks:
        assert task.local_blocker() is None and task.workdir == "/app"
        assert task.section("metadata")["split"] == "heldout"
        assert task.solution["solve.sh"].startswith(b"#!/bin/bash\n")
        assert b"/logs/verifier/reward.txt" in task.tests["test.sh"]
        assert set(task.local_tree()) == {p.name for p in (task.path / "environment").iterdir()} - {
            "Dockerfile"
        }
    if _local_reason():
        return
    env = envs.make(f"harbor:{tmp_path / 'ds'}")
    try:
        env.reset(seed=0, options={"index": 2})
        env.step(env.oracle_action())  # type: ignore[arg-type]
        _, reward, done, _, _ = env.step(Message("assistant", "Done."))
        assert done and reward == 1.0
    finally:
        env.close()
