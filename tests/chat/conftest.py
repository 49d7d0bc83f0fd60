"""Tokenizers for the real published chat templates (Qwen2.5, Qwen3, Llama-3.1).

Each template is attached to the tiny locally trained tokenizer after adding the special tokens
it writes, so rendering and tokenizing behave as with the real checkpoint's tokenizer (the
vocabulary differs; the template logic and special-token boundaries are what is under test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from agentrl.models.tiny import build_tiny

TEMPLATES = Path(__file__).parents[1] / "data" / "chat_templates"
LLAMA_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
]


def template_tokenizer(name: str) -> Any:
    """The tiny tokenizer wearing `name`'s chat template ("tiny" keeps its own)."""
    tok = AutoTokenizer.from_pretrained(build_tiny("qwen2"))
    if name == "tiny":
        return tok
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    if name.startswith("llama"):
        tok.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
        tok.add_tokens(LLAMA_TOKENS, special_tokens=True)
    return tok


@pytest.fixture(scope="session")
def tokenizers() -> dict[str, Any]:
    return {n: template_tokenizer(n) for n in ("tiny", "qwen2_5", "qwen3", "llama3_1")}
