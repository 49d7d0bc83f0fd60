"""The wiring: `agentrl.assembly` builds what the estimator's registry entry asks for, the LR
schedules span the run's true optimizer steps (`optim.scheduler: cosine`), and `Trainer.train`
closes every component even when a step raises."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from trainer_synth import train_overrides

from agentrl.algorithms import ADV_ESTIMATORS, get_adv_estimator, register_adv_estimator
from agentrl.assembly import build_trainer
from agentrl.assembly.build import build_learner
from agentrl.backends import TorchBackend
from agentrl.config import TrainConfig, TrainerConfig, load_config
from agentrl.models.load import load_model
from agentrl.trainer.actor import optimizer_steps
from agentrl.trainer.components import Components
from agentrl.trainer.run_dir import RunDirError

pytestmark = pytest.mark.timeout(300)


def _cfg(cache: Path, out: Path, **extra: object) -> TrainConfig:
    return load_config(TrainConfig, None, train_overrides(cache, out, **extra))


def test_optimizer_steps_count_every_mini_batch_of_the_run() -> None:
    t = TrainerConfig(steps=5, mini_batch_size=4)
    assert optimizer_steps(t, rows_per_step=8, epochs=2) == 5 * 2 * 2
    assert optimizer_steps(t, rows_per_step=9, epochs=1) == 5 * 3  # a last, smaller one


def test_cosine_schedule_ends_at_zero_on_the_last_step(tiny_model_dir: Path, tmp_path) -> None:
    """`optim.scheduler: cosine` with gae (actor + critic): 2 steps × (4 rows / mini-batches of
    2) = 4 optimizer steps each, so the LR is half way down after step 1 and 0 after step 2."""
    cfg = _cfg(
        tiny_model_dir.parent,
        tmp_path,
        optim__scheduler="cosine",
        optim__lr=1e-3,
        algorithm__adv_estimator="gae",
        trainer__steps=2,
        trainer__mini_batch_size=2,
        data__eval_episodes=0,
    )
    trainer = build_trainer(cfg)
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert lrs == pytest.approx([0.5e-3, 0.0], rel=1e-6, abs=1e-12)  # float32 cosine
    critic = trainer.c.critic
    assert critic is not None and critic.scheduler.get_last_lr()[0] == pytest.approx(0.0)
    assert critic.scheduler.last_epoch == 4  # the critic steps its own schedule


def test_a_plugin_estimator_declares_its_critic(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The assembly reads `needs_critic` from the registry entry: no edit elsewhere."""
    register_adv_estimator("plugin_values", needs_critic=True)(get_adv_estimator("gae"))
    try:
        backend = TorchBackend("cpu")
        for estimator, has_critic in [("plugin_values", True), ("grpo", False)]:
            cfg = _cfg(tiny_model_dir.parent, tmp_path, algorithm__adv_estimator=estimator)
            _, _, critic = build_learner(cfg, load_model(cfg.model), backend)
            assert (critic is not None) == has_critic, estimator
    finally:
        del ADV_ESTIMATORS["plugin_values"]


def _spy_closes(trainer: Any, mp: pytest.MonkeyPatch) -> list[str]:
    closed: list[str] = []
    for name in ("rollout", "backend"):
        part = getattr(trainer.c, name)
        real = part.close

        def close(real: Any = real, name: str = name) -> None:
            closed.append(name)
            real()

        mp.setattr(part, "close", close)
    return closed


def test_a_step_that_raises_still_closes_components(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = build_trainer(_cfg(tiny_model_dir.parent, tmp_path, data__eval_episodes=0))
    closed = _spy_closes(trainer, monkeypatch)

    def broken_step() -> dict[str, float]:
        raise RuntimeError("step failed")

    monkeypatch.setattr(trainer, "train_step", broken_step)
    with pytest.raises(RuntimeError, match="step failed"):
        trainer.train()
    assert closed == ["rollout", "backend"]
    loop = trainer.c.rollout.runner._loop
    assert loop is None or loop.is_closed()  # the engine closed on its loop
    session = json.loads((tmp_path / "run.json").read_text())["sessions"][-1]
    assert "end" in session  # the session that started is ended


def test_a_refused_run_folder_closes_components_and_leaves_it_be(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder holding another run is refused; that run's files are not touched."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    before = sorted(p.name for p in tmp_path.iterdir())
    trainer = build_trainer(_cfg(tiny_model_dir.parent, tmp_path, data__eval_episodes=0))
    closed = _spy_closes(trainer, monkeypatch)
    with pytest.raises(RunDirError):
        trainer.train()
    assert closed == ["rollout", "backend"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no config.yaml written


def test_components_close_every_part_when_one_raises() -> None:
    """Named fakes: only the order and the error matter here."""
    calls: list[str] = []

    def part(name: str, fail: bool = False) -> Any:
        def close() -> None:
            calls.append(name)
            if fail:
                raise OSError(f"{name} failed")

        return close

    c = Components(
        backend=SimpleNamespace(close=part("backend")),  # type: ignore[arg-type]
        tokenizer=None,
        actor=None,  # type: ignore[arg-type]
        reference=None,
        critic=None,
        rollout=SimpleNamespace(close=part("rollout", fail=True)),  # type: ignore[arg-type]
        scorer=None,  # type: ignore[arg-type]
        data=None,  # type: ignore[arg-type]
        success_at=1.0,
        make_env=lambda: None,
        cleanup=[part("workers")],
    )
    with pytest.raises(OSError, match="rollout failed"):
        c.close()
    assert calls == ["rollout", "workers", "backend"]


def test_the_trainer_imports_no_wiring_and_no_loops_remain() -> None:
    """The graph docs/wiring.md shows, from `scripts/import_graph.py` (ast, nothing imported)."""
    import importlib.util

    root = Path(__file__).parents[2]
    spec = importlib.util.spec_from_file_location("import_graph", root / "scripts/import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    edges = module.graph(root)
    assert not {("trainer", "assembly"), ("trainer", "workers"), ("trainer", "engines")} & set(
        edges
    )
    rooms = {"assembly", "trainer", "workers", "rollout"}
    loops = {(a, b) for a, b in edges if (b, a) in edges and {a, b} <= rooms}
    assert not loops
