"""`agentrl train --resume` after a SIGKILL: no step repeated or skipped, data cursor continues.

The killed run is the real CLI in a subprocess. The kill is deterministic rather than a race
against 0.1 s steps: a wrapper installs a hook that SIGKILLs the process itself either right
after the step-2 checkpoint is written, or in step 3 after its metrics row is logged but before
its checkpoint (so resume must drop that row and redo the step). The resumed run is compared
with an uninterrupted one: same cursor per step (the same prompts), and since the checkpoint
restores weights, optimizer, RNG and the shuffling generator, nearly the same final weights.

"Nearly": rollout sampling is not bit-reproducible across processes (unseeded engine requests
draw seeds in episode-arrival order), so two uninterrupted runs already differ by about 5% of
the distance training moved the weights, while one skipped, repeated or badly restored step
shows up as about 25%. The check sits between the two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides
from transformers import AutoModelForCausalLM

pytestmark = pytest.mark.timeout(180)
KILL_POINTS = ("after_checkpoint_2", "mid_step_3")

KILL_HOOK = """
import os, signal, sys
from agentrl.trainer import checkpoint, logger

if os.environ["KILL_AT"] == "after_checkpoint_2":
    save = checkpoint.Checkpointer.save
    def save_then_die(self, step, state, *args, **kwargs):
        out = save(self, step, state, *args, **kwargs)
        if step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    checkpoint.Checkpointer.save = save_then_die
else:  # "mid_step_3": metrics of step 3 written, its checkpoint not yet
    log = logger.MetricsLogger.log
    def log_then_die(self, step, metrics, file="metrics.jsonl", **kw):
        log(self, step, metrics, file, **kw)
        if step == 3 and file == "metrics.jsonl":
            os.kill(os.getpid(), signal.SIGKILL)
    logger.MetricsLogger.log = log_then_die

from agentrl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _args(cache: Path, out: Path) -> list[str]:
    config = out.parent / f"{out.name}.yaml"
    config.write_text("model:\n  path: tiny:qwen2\n")
    extra = {"trainer__steps": 4, "trainer__save_every": 1, "algorithm__entropy_coef": 0.05}
    return ["train", "--config", str(config), *train_overrides(cache, out, **extra)]


def _start(argv: list[str], kill_at: str | None = None) -> subprocess.Popen:
    """The CLI in a subprocess (single-threaded: the runs go in parallel on 2 cores)."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "agentrl.cli", *argv]
    if kill_at:
        env["KILL_AT"] = kill_at
        cmd = [sys.executable, "-c", KILL_HOOK, *argv]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _wait(proc: subprocess.Popen) -> int:
    out, _ = proc.communicate(timeout=150)
    if proc.returncode not in (0, -9):
        raise AssertionError(out[-5000:])
    return proc.returncode


def _rows(out: Path, file: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (out / file).read_text().splitlines() if line]


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """An uninterrupted run and, per kill point, a killed run then its resume."""
    root, cache = tmp_path_factory.mktemp("resume"), tiny_model_dir.parent
    args = {name: _args(cache, root / name) for name in ("straight", *KILL_POINTS)}
    first = {
        name: _start(argv, None if name == "straight" else name) for name, argv in args.items()
    }
    codes = {name: _wait(proc) for name, proc in first.items()}
    killed = {name: _rows(root / name) for name in KILL_POINTS}
    latest = {name: (root / name / "checkpoints" / "latest").read_text() for name in KILL_POINTS}
    resumed = {name: _start([*args[name], "--resume"]) for name in KILL_POINTS}
    codes |= {f"{name}/resume": _wait(proc) for name, proc in resumed.items()}
    return {
        "codes": codes,
        "killed": killed,
        "latest_after_kill": latest,
        "rows": {name: _rows(root / name) for name in args},
        "eval": {name: _rows(root / name, "eval.jsonl") for name in args},
        "latest": {name: (root / name / "checkpoints" / "latest").read_text() for name in args},
        "final": {name: _final_weights(root / name) for name in args},
        "initial": AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).state_dict(),
    }


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    state = torch.load(out / "checkpoints" / "step_000004" / "state.pt", weights_only=False)
    return state["model"]


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return float(sum(((a[k].float() - b[k].float()) ** 2).sum() for k in a) ** 0.5)


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_resume_after_sigkill(kill_at: str, runs: dict[str, dict]) -> None:
    assert runs["codes"]["straight"] == 0
    assert runs["codes"][kill_at] == -9
    assert runs["latest_after_kill"][kill_at] == "step_000002"
    logged = [r["step"] for r in runs["killed"][kill_at]]
    assert logged == ([1, 2] if kill_at == "after_checkpoint_2" else [1, 2, 3])

    assert runs["codes"][f"{kill_at}/resume"] == 0
    rows, straight = runs["rows"][kill_at], runs["rows"]["straight"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert runs["latest"][kill_at] == "step_000004"
    assert [r["data/cursor"] for r in rows] == [r["data/cursor"] for r in straight]
    assert [r["data/cursor"] for r in rows] == [2.0, 4.0, 6.0, 8.0]
    final, reference = runs["final"][kill_at], runs["final"]["straight"]
    moved = _distance(reference, runs["initial"])
    assert moved > 0
    assert _distance(final, reference) < 0.12 * moved
    assert [r["step"] for r in runs["eval"][kill_at]] == [0, 4]  # "before" eval not redone
