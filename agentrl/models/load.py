"""Load a policy (and its tokenizer) from a local checkpoint directory or a `tiny:` preset."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.config import ModelConfig

from .tiny import resolve_model_path

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_tokenizer(cfg: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    path = resolve_model_path(cfg.tokenizer or cfg.path, cfg.cache_dir)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: ModelConfig, *, trainable: bool = True) -> torch.nn.Module:
    """A causal LM in `cfg.dtype`; gradient checkpointing and LoRA applied when trainable."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(cfg.path, cfg.cache_dir)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
    )
    if not trainable:
        return model.eval()
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora.enabled:
        model = apply_lora(model, cfg)
    return model


def apply_lora(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """RL on adapters: only LoRA weights train; the engine receives merged weights."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - extra not installed
        raise ImportError("model.lora.enabled needs peft: pip install 'agentrl[lora]'") from e
    lcfg = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)
