"""Helpers for engine tests: tiny models and reference outputs from plain transformers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

CACHE = Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


def load_tiny(preset: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.models.tiny import build_tiny

    path = build_tiny(preset, str(CACHE))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def reference_greedy(model: Any, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Unpadded single-prompt `model.generate` (EOS ends it, as in the engine)."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=model.config.pad_token_id,
    )
    return out[0, len(prompt) :].tolist()


def rescore(model: Any, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """log p(output[i]) from one full forward over prompt+output, temperature-scaled."""
    ids = torch.tensor([prompt + output], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float().cpu()
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, dim=-1)
    return logp.gather(-1, torch.tensor(output)[:, None]).squeeze(-1).tolist()
