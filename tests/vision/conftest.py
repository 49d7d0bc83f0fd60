"""Fixtures for the vision tests: one tiny random-init Qwen2-VL built locally per session."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


@pytest.fixture(scope="session")
def tiny_vlm_dir() -> Path:
    from agentrl.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm("qwen2_vl", str(CACHE))


@pytest.fixture(scope="session")
def vlm(tiny_vlm_dir: Path) -> tuple[Any, Any, Any]:
    """(model, tokenizer, vision processor), loaded the way the trainer loads them."""
    from agentrl.config import ModelConfig
    from agentrl.models.load import load_model, load_tokenizer, load_vision_processor

    cfg = ModelConfig(path=str(tiny_vlm_dir), enable_vision=True)
    tok = load_tokenizer(cfg)
    return load_model(cfg, trainable=False), tok, load_vision_processor(cfg, tok)
