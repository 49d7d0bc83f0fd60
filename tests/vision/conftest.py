"""Fixtures for the vision tests: one tiny random-init VLM per preset, built locally per session.

Every test that takes `vlm` (or `tiny_vlm_dir`) runs once per preset in `PRESETS`, so each
model family is held to the same bar: rescore within 1e-4, token counts, one GRPO step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))
PRESETS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


@pytest.fixture(scope="session", params=PRESETS)
def vlm_preset(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def tiny_vlm_dir(vlm_preset: str) -> Path:
    from agentrl.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(vlm_preset, str(CACHE))


@pytest.fixture(scope="session")
def vlm(tiny_vlm_dir: Path) -> tuple[Any, Any, Any]:
    """(model, tokenizer, vision processor), loaded the way the trainer loads them."""
    from agentrl.config import ModelConfig
    from agentrl.models.load import load_model, load_tokenizer, load_vision_processor

    cfg = ModelConfig(path=str(tiny_vlm_dir), enable_vision=True)
    tok = load_tokenizer(cfg)
    return load_model(cfg, trainable=False), tok, load_vision_processor(cfg, tok)
