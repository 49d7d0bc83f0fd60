"""Fixtures: the tiny tokenizer and the standard episodes (see viewer_trajs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from viewer_trajs import standard_episodes

from agentrl.types import Trajectory


@pytest.fixture(scope="session")
def tiny_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture
def episodes(tokenizer: Any) -> list[Trajectory]:
    """Fresh per test: tests mutate metadata."""
    return standard_episodes(tokenizer)
