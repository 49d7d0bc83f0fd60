"""`agentrl rollout ... --out traj.jsonl` then `agentrl view traj.jsonl` (the README's flow):
the trajectories name their tokenizer, so the page shows text, not token ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.cli.rollout import tokenizer_ref
from agentrl.types import read_jsonl


def test_rollout_records_its_tokenizer_and_view_decodes_with_it(
    tmp_path: Path, agentrl_cache: Path, monkeypatch, capsys
) -> None:
    pytest.importorskip("agentrl.engines.hf")
    monkeypatch.setenv("AGENTRL_CACHE", str(agentrl_cache))
    out = tmp_path / "traj.jsonl"
    argv = ["rollout", "--env", "math/calc-v0", "--model", "tiny:qwen2", "--n", "2"]
    argv += ["--episodes", "1", "--max-new-tokens", "8", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0
    assert [t.metadata["tokenizer"] for t in read_jsonl(out)] == ["tiny:qwen2"] * 2
    capsys.readouterr()
    assert main(["view", str(out), "--out", str(tmp_path / "r.html")]) == 0
    assert "no tokenizer" not in capsys.readouterr().out


def test_a_local_checkpoint_is_recorded_by_absolute_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    assert tokenizer_ref("ckpt") == str(tmp_path / "ckpt")
    assert tokenizer_ref("tiny:qwen2") == "tiny:qwen2"
    assert tokenizer_ref("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
