"""`agentrl rollout` end to end on the tiny model (HF engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.types import read_jsonl


def test_rollout_cli_writes_valid_trajectories(tmp_path: Path, agent_path: Path) -> None:
    pytest.importorskip("agentrl.engines.hf")
    out = tmp_path / "t.jsonl"
    code = main(
        [
            "rollout",
            "--env",
            "math/calc-v0",
            "--model",
            str(agent_path),
            "--n",
            "2",
            "--episodes",
            "2",
            "--max-new-tokens",
            "40",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    trajs = list(read_jsonl(out))
    assert len(trajs) == 4 and len({t.group_id for t in trajs}) == 2
    for t in trajs:
        t.validate()
        assert t.env_id == "math/calc-v0" and sum(t.loss_mask) > 0
