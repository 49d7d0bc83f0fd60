"""Serve fixtures: the fine-tuned tiny calc agent shared with the rollout tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import ChatFormat

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # shared test engines/model

from agent_model import agent_path  # noqa: E402


@pytest.fixture(scope="session")
def served_model() -> tuple[Any, ChatFormat]:
    path = agent_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, ChatFormat(AutoTokenizer.from_pretrained(path))
