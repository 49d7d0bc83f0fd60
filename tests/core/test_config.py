import pytest

from agentrl.config import ConfigError, TrainConfig, load_config


def test_defaults_and_overrides():
    cfg = load_config(
        TrainConfig, None, ["trainer.steps=3", "optim.lr=1e-4", "sampling.stop=[a, b]"]
    )
    assert cfg.trainer.steps == 3 and cfg.optim.lr == 1e-4 and cfg.sampling.stop == ["a", "b"]


def test_unknown_key_names_key_and_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("trainer:\n  stpes: 3\n")
    with pytest.raises(
        ConfigError, match=r"bad.yaml: trainer.stpes: unknown key \(did you mean 'steps'\?\)"
    ):
        load_config(TrainConfig, p)


def test_wrong_type_named(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("rollout:\n  n: four\n")
    with pytest.raises(ConfigError, match=r"rollout.n: expected int, got 'four'"):
        load_config(TrainConfig, p)
    with pytest.raises(ConfigError, match=r"engine.kind: 'tgi' is not one of"):
        load_config(TrainConfig, None, ["engine.kind=tgi"])
    with pytest.raises(ConfigError, match="trainer.steps: expected int"):
        load_config(TrainConfig, None, ["trainer.steps=true"])


def test_every_shipped_config_loads():
    from pathlib import Path

    root = Path(__file__).parents[2].joinpath("configs")
    configs = sorted(root.glob("*.yaml"))
    assert configs, "configs/ has no recipes"
    matrix = sorted(root.glob("matrix/*.yaml"))  # the learning matrix's cells (issue #42)
    assert len(matrix) >= 8, "configs/matrix/ lost cells"
    for path in configs + matrix:
        load_config(TrainConfig, path)
