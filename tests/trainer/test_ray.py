"""`trainer.placement=ray` on a local 2-CPU Ray cluster: the learner and the rollout are Ray
actors, composed by the same `Trainer` loop, and one real step matches the local placement.

`algorithm.entropy_coef` makes the gradient non-zero even though a random tiny model earns no
reward, so the step really moves the weights that then have to reach the rollout engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster() -> object:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _cfg(cache: Path, out: Path, placement: str, **extra: object) -> TrainConfig:
    overrides = train_overrides(
        cache, out, trainer__placement=placement, algorithm__entropy_coef=0.05, **extra
    )
    return load_config(TrainConfig, None, overrides)


def _engine_weights(worker: object) -> dict[str, torch.Tensor]:
    fn = lambda self: {k: v.clone() for k, v in self.rollout.engine.model.state_dict().items()}  # noqa: E731
    return ray.get(worker.__ray_call__.remote(fn))  # type: ignore[attr-defined]


def test_ray_step_matches_local(cluster: object, tiny_model_dir: Path, tmp_path: Path) -> None:
    """Colocated (the default): one bundle, both actors share it."""
    from agentrl.workers.ray_proxies import RayActor, RayRollout

    cache = tiny_model_dir.parent
    local = build_trainer(_cfg(cache, tmp_path / "local", "local"))
    want = local.train_step()
    local.finish()

    trainer = build_trainer(_cfg(cache, tmp_path / "ray", "ray"))
    try:
        assert isinstance(trainer.actor, RayActor)
        assert isinstance(trainer.c.rollout, RayRollout)
        got = trainer.train_step()
        assert got["grad_norm"] > 0
        assert got["data/cursor"] == want["data/cursor"] == 2
        # Same computation; tolerances cover sampling, which is not bit-reproducible across
        # processes (engine requests draw seeds in episode-arrival order).
        for key, rel in (("loss", 1e-3), ("entropy", 1e-3), ("grad_norm", 5e-2)):
            assert got[key] == pytest.approx(want[key], rel=rel), key
        assert got["response_length/mean"] == want["response_length/mean"]
        learner = dict(trainer.actor.named_weights())
        engine = _engine_weights(trainer.c.rollout.handle)
        for name, tensor in learner.items():
            assert torch.equal(engine[name], tensor), f"engine not synced: {name}"
        state = trainer.state()  # the checkpoint path crosses the process boundary too
        assert state["cursor"] == 2 and state["optimizer"]["state"]
        assert trainer.evaluate("after")["episodes"] == 2
    finally:
        trainer.finish()


def test_ray_train_loop_end_to_end(cluster: object, tiny_model_dir: Path, tmp_path: Path) -> None:
    """`Trainer.train()` itself (eval, step, checkpoint, eval, teardown), split placement:
    each actor in its own bundle."""
    cfg = _cfg(
        tiny_model_dir.parent, tmp_path, "ray", trainer__save_every=1, trainer__colocate=False
    )
    result = build_trainer(cfg).train()
    assert result["episodes"] == 2
    assert (tmp_path / "checkpoints" / "step_000001" / "state.pt").exists()
    assert not ray.util.placement_group_table() or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values()
    )


USER_ENV = """
from agentrl.envs import register, spec

register("demo/calc-user-v0", spec("math/calc-easy-v0").entry_point)
"""


def test_ray_workers_import_user_env_modules(
    cluster: object, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """An env from a user file (`--env-module` → `data.env_modules`) is built inside the Ray
    rollout worker, a process that never ran the driver's import."""
    path = tmp_path / "user_env.py"
    path.write_text(USER_ENV)
    # Config load imports the file in the driver too (to check data.env names a real env).
    extra = {"data__env": "demo/calc-user-v0", "data__env_modules": f"[{path}]"}
    cfg = _cfg(tiny_model_dir.parent, tmp_path / "run", "ray", **extra)
    assert cfg.data.env_modules == [str(path)]
    trainer = build_trainer(cfg)
    try:
        fn = lambda self: "demo/calc-user-v0" in __import__("agentrl.envs").envs.registry  # noqa: E731
        assert ray.get(trainer.c.rollout.handle.__ray_call__.remote(fn))
        assert trainer.train_step()["groups"] == 2
    finally:
        trainer.finish()


def test_ray_step_with_sum_pi_squared_and_adaptive_kl(
    cluster: object, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The optimal token baseline's Σπ² pass and the step's KL coefficient cross to the learner
    actor: one step runs, and the KL controller moved the coefficient after it."""
    cfg = _cfg(
        tiny_model_dir.parent,
        tmp_path,
        "ray",
        algorithm__adv_estimator="optimal_token_baseline",
        algorithm__kl__coef=0.05,
        algorithm__kl__ctrl="adaptive",
        algorithm__kl__horizon=10,
    )
    trainer = build_trainer(cfg)
    try:
        got = trainer.train_step()
        assert got["kl/coef"] == pytest.approx(0.05) and "kl_seq_mean" in got
        assert trainer.kl_ctrl.value != pytest.approx(0.05)
        assert got["grad_norm"] > 0
    finally:
        trainer.finish()


def test_ray_pipelined_run_keeps_its_bounds(
    cluster: object, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """`trainer.async.max_staleness: 1` with the rollout in its Ray actor (split placement):
    groups come back through the actor's poller, every sampled token carries the version that
    sampled it, none is more than one behind, and every issued prompt is trained once or left
    pending."""
    import json

    cfg = _cfg(
        tiny_model_dir.parent,
        tmp_path,
        "ray",
        trainer__steps=4,
        trainer__colocate=False,
        trainer__dump_rollouts_every=1,
        trainer__async__max_staleness=1,
        data__eval_episodes=0,
    )
    build_trainer(cfg).train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert max(r["async/staleness_max"] for r in rows) <= 1
    assert max(r["async/staleness_mean"] for r in rows) > 0  # it did overlap
    trained = []
    for step in range(1, 5):
        path = tmp_path / "rollouts" / f"step_{step:06d}.jsonl"
        for t in map(json.loads, path.read_text().splitlines()):
            sampled = {v for v, m in zip(t["weight_versions"], t["loss_mask"], strict=True) if m}
            assert sampled and -1 not in sampled and all(step - 1 - v <= 1 for v in sampled)
            trained.append(t["metadata"]["prompt_index"])
    assert len(trained) == 4 * 2 * 2  # 4 steps x 2 prompts x rollout.n 2
    assert all(trained.count(k) == 2 for k in set(trained))  # rollout.n samples, once
