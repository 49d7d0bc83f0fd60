"""`engine.kind=K` on the command line over a recipe written for another engine kind: the
recipe's options of its own kind are left out with one warning (they were refused one by one
before, and the user had to reset each by hand); options given beside it are still checked."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentrl.config import TrainConfig
from agentrl.config.loader import load_config
from agentrl.engines.build import config_problems

RECIPE = Path(__file__).parents[2] / "configs" / "matrix" / "smollm2-calc.yaml"


def test_switching_the_engine_leaves_out_the_recipes_hf_options(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kept = load_config(TrainConfig, RECIPE, validate=False)
    assert kept.engine.kind == "hf" and config_problems(kept.engine) == []
    assert kept.engine.hf.fast is True  # the recipe tunes the hf engine
    with caplog.at_level(logging.WARNING, logger="agentrl.config"):
        cfg = load_config(TrainConfig, RECIPE, ["engine.kind=vllm"], validate=False)
    assert cfg.engine.kind == "vllm" and config_problems(cfg.engine) == []
    assert [r.getMessage() for r in caplog.records] == [
        "engine.kind=vllm on the command line: the config file's options of engine.kind=hf "
        "(engine.hf) are left out"
    ]
    assert cfg.sampling == kept.sampling and cfg.model == kept.model  # the rest is the recipe's


def test_options_given_beside_the_switch_are_still_checked() -> None:
    cfg = load_config(
        TrainConfig, RECIPE, ["engine.kind=vllm", "engine.hf.fast=true"], validate=False
    )
    assert config_problems(cfg.engine) == [
        "engine.hf.fast: an option of engine.kind=hf; this config builds engine.kind=vllm"
    ]


def test_the_same_kind_leaves_everything(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentrl.config"):
        cfg = load_config(TrainConfig, RECIPE, ["engine.kind=hf"], validate=False)
    assert cfg.engine.hf.fast is True and not caplog.records
