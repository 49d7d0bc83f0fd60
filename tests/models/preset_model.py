"""One way the real-model tests load a GGUF preset: converted once into the suite's shared
cache, then its tokenizer and fp32 model; a missing `gguf` package skips the module's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.models import gguf


def converted(preset: str, cache: Path) -> tuple[Path, object, object]:
    """(converted dir, tokenizer, fp32 model in eval mode) of `preset`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        path = gguf.resolve_gguf(preset, str(cache))
    except ImportError as e:
        pytest.skip(str(e))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return path, tok, model
