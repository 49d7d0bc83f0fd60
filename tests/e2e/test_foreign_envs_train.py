"""`agentrl train --env harbor:...` and `--env ors:...`: a few GRPO steps on the tiny model on
CPU through the real CLI, real sandboxes and the real openreward SDK; every episode ends with
a reward recorded (from the Harbor verifier's reward file / the ORS tools) and no error."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.types import read_jsonl

pytestmark = pytest.mark.timeout(900)


def _args(out: Path, cache: Path, **extra: object) -> list[str]:
    keys: dict[str, object] = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": cache,
        "rollout.n": 2,
        "rollout.max_turns": 2,
        "sampling.max_new_tokens": 24,
        "rollout.max_total_tokens": 4096,
        "data.batch_size": 2,
        "data.eval_episodes": 0,
        "trainer.steps": 2,
        "trainer.mini_batch_size": 4,
        "trainer.micro_batch_size": 4,
        "trainer.tensorboard": "false",
        "trainer.out_dir": out,
        "sft.steps": 0,
        "trainer.eval_every": 0,
        "trainer.save_every": 0,
        "trainer.dump_rollouts_every": 1,
    }
    keys |= {k.replace("__", "."): v for k, v in extra.items()}
    return [f"{k}={v}" for k, v in keys.items()]


def _check_run(out: Path, steps: int = 2, per_step: int = 4) -> list:
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert all("reward/mean" in m for m in metrics)
    trajs = [t for p in sorted((out / "rollouts").glob("step_*.jsonl")) for t in read_jsonl(p)]
    assert len(trajs) == steps * per_step
    for t in trajs:
        # overlong: a generation that hit max_new_tokens (the tiny model rarely stops)
        assert t.termination in ("done", "truncated", "max_turns", "overlong"), t.termination
        assert t.metadata.get("error") is None, t.metadata["error"]
        assert isinstance(t.reward, float)
    return trajs


def test_a_few_grpo_steps_on_a_harbor_task_family(tmp_path: Path, agentrl_cache: Path) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("local sandbox needs root and bubblewrap")
    out = tmp_path / "harbor"
    # SFT on the tasks' oracles (solve.sh as one bash call, then a final message) first, so
    # some episodes end with a final message and are graded by the task's verifier.
    args = _args(
        out,
        agentrl_cache,
        rollout__max_turns=3,
        sampling__max_new_tokens=200,
        sampling__temperature=0.3,
        sft__steps=30,
        sft__lr=5e-3,
        sft__demos=5,
        sft__batch_size=5,
    )
    assert main(["train", "--env", "harbor:bundled", *args]) == 0
    trajs = _check_run(out)
    assert {t.reward for t in trajs} <= {0.0, 1.0}  # the bundled verifiers write 0 or 1
    assert any(t.termination == "done" for t in trajs)  # graded by the tests in a sandbox


def test_a_few_grpo_steps_on_an_ors_env(tmp_path: Path, agentrl_cache: Path) -> None:
    pytest.importorskip("openreward", reason="needs openreward: pip install 'agentrl[ors]'")
    out = tmp_path / "ors"
    assert main(["train", "--env", "ors:arith", *_args(out, agentrl_cache)]) == 0
    trajs = _check_run(out)
    assert {t.reward for t in trajs} <= {0.0, 1.0}
