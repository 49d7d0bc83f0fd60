"""`trainer.async.producer: process` (agentrl/workers/process_rollout.py) when things go wrong,
with the real child process and a real tiny model: nothing hangs, each failure names itself.

- An env the trainer's own script registered (not in `data.env_modules`) fails the child's
  start-up with an error naming the env and the fix.
- A child killed mid-run fails the next call with its exit code, within seconds.
- A bad weight sync (a name the engine lacks) is refused before anything is written.
- The child's results equal an in-process rollout's on the same weights and seeds.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agentrl.assembly import build_components
from agentrl.config import TrainConfig, load_config
from agentrl.engines.base import EngineError

pytestmark = pytest.mark.timeout(300)


def _cfg(cache: Path, *extra: str) -> TrainConfig:
    sets = [
        "model.path=tiny:qwen2",
        f"model.cache_dir={cache}",
        "data.env=math/calc-easy-v0",
        "rollout.n=2",
        "sampling.max_new_tokens=8",
        "trainer.cpu_threads=1",
        "trainer.async.producer_timeout_s=120",
        *extra,
    ]
    return load_config(TrainConfig, None, sets)


def test_env_only_in_the_trainers_script_is_named(tiny_model_dir: Path) -> None:
    from agentrl.envs import register
    from agentrl.envs.math.calc import CalcEnv

    register("test/script-only-calc-v0", CalcEnv, description="registered here only")
    cfg = _cfg(
        tiny_model_dir.parent, "data.env=test/script-only-calc-v0", "trainer.async.producer=process"
    )
    with pytest.raises(EngineError, match=r"script-only-calc-v0.*data.env_modules"):
        build_components(cfg)


def test_killed_child_fails_the_next_call(tiny_model_dir: Path) -> None:
    c = build_components(_cfg(tiny_model_dir.parent, "trainer.async.producer=process"))
    try:
        rollout = c.rollout
        pid = rollout.proc.pid  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineError, match=r"died \(exit code -9\)"):
            rollout.collect([1, 2], 2)
        assert time.monotonic() - t0 < 30
    finally:
        c.close()


def test_bad_weight_name_is_refused(tiny_model_dir: Path) -> None:
    c = build_components(_cfg(tiny_model_dir.parent, "trainer.async.producer=process"))
    try:
        weights = dict(c.actor.named_weights())
        name, tensor = next(iter(weights.items()))
        with pytest.raises(EngineError, match="unknown parameter names"):
            c.rollout.sync_weights([("no.such.weight", tensor)])
        c.rollout.sync_weights(weights.items())  # the good one still lands
        assert c.rollout.producer is not None and c.rollout.producer.weight_version == 1
    finally:
        c.close()


def test_child_matches_in_process_rollout(tiny_model_dir: Path) -> None:
    results = {}
    for producer in ("thread", "process"):
        c = build_components(
            _cfg(tiny_model_dir.parent, f"trainer.async.producer={producer}", "trainer.seed=3")
        )
        try:
            c.rollout.sync_weights(c.actor.named_weights())
            groups = c.rollout.collect([5, 6], 2)
            results[producer] = [
                (t.prompt_ids, t.response_ids, t.reward, t.weight_versions)
                for g in groups
                for t in g.trajectories
            ]
        finally:
            c.close()
    assert results["thread"] == results["process"]
