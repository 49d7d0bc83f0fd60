"""Fixtures for engine tests: a tiny qwen2 model built once and cached by content hash."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import load_tiny


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """(model, tokenizer) of the qwen2 preset; tests that change weights load their own."""
    return load_tiny("qwen2")
