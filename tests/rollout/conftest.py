"""Fixtures: the tiny Qwen2 checkpoint and the fine-tuned calc agent (see `agent_model`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import ChatFormat
from agentrl.models.tiny import build_tiny

sys.path.insert(0, str(Path(__file__).parent))  # simple_engine, agent_model

from agent_model import agent_path as _agent_path  # noqa: E402


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    return build_tiny("qwen2")


@pytest.fixture(scope="session")
def agent_path() -> Path:
    return _agent_path()


@pytest.fixture(scope="session")
def agent_model(agent_path: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(agent_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def chat(tiny_path: Path) -> ChatFormat:
    return ChatFormat(AutoTokenizer.from_pretrained(tiny_path))
