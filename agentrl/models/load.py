"""Load a policy (and its tokenizer) from a local checkpoint directory or a `tiny:` preset.

A real checkpoint loads exactly like a preset: `model.path: /data/ckpt/Qwen2.5-0.5B-Instruct`
(any directory with `config.json`, weights and a tokenizer with a chat template). Nothing is
downloaded; family quirks are handled here so every role (actor, reference, critic, engine)
gets the same, correct model:

- Gemma 2 soft-caps attention logits, which PyTorch SDPA cannot do; `sdpa` falls back to
  `eager` (flash-attention-2 supports soft-capping and is kept).
- LoRA `target_modules: [all-linear]` is passed to peft as its `"all-linear"` shorthand.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch

from agentrl.config import ModelConfig

from .batch_invariant import apply_kernels
from .tiny import resolve_model_path

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _local(key: str, path: str, cache_dir: str) -> str:
    """`resolve_model_path`, but a local path that does not exist is one `ConfigError` line
    naming the key (the CLI checks this at config load; this covers the Python API)."""
    from agentrl.models.paths import missing_model_file

    missing_model_file(key, path, "model")
    return resolve_model_path(path, cache_dir)


def load_tokenizer(cfg: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    key = "model.tokenizer" if cfg.tokenizer else "model.path"
    path = _local(key, cfg.tokenizer or cfg.path, cfg.cache_dir)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as e:  # a hub id without network: one line, not a traceback
        if Path(path).expanduser().exists():
            raise
        from agentrl.models.paths import unreachable_model

        raise unreachable_model(key, path, e) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def attn_implementation(path: str, requested: str) -> str:
    """The attention kernel to load `path` with: `requested`, unless the architecture needs
    something else to be exact (soft-capped attention has no SDPA kernel)."""
    if requested != "sdpa":
        return requested
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    text = getattr(config, "text_config", None) or config
    if getattr(text, "attn_logit_softcapping", None):
        return "eager"
    return requested


def load_model(cfg: ModelConfig, *, trainable: bool = True) -> torch.nn.Module:
    """A causal LM in `cfg.dtype`; gradient checkpointing and LoRA applied when trainable."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    path = _local("model.path", cfg.path, cfg.cache_dir)
    # enable_vision: the image-text-to-text class (e.g. Qwen2VLForConditionalGeneration), which
    # keeps the vision tower; AutoModelForCausalLM would not accept image inputs.
    auto = AutoModelForImageTextToText if cfg.enable_vision else AutoModelForCausalLM
    model = auto.from_pretrained(
        path,
        dtype=DTYPES[cfg.dtype],
        attn_implementation=attn_implementation(path, cfg.attn_implementation),
    )
    apply_kernels(model, cfg.kernels)
    if not trainable:
        return model.eval()
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora.enabled:
        return apply_lora(model, cfg)
    return model


def load_vision_processor(cfg: ModelConfig, tokenizer: Any) -> Any:
    """The image processor + placeholder expander of a `model.enable_vision` checkpoint (read
    from `model.path`, where `preprocessor_config.json` lives); None for text models."""
    if not cfg.enable_vision:
        return None
    from agentrl.multimodal import load_vision_processor as load

    return load(resolve_model_path(cfg.path, cfg.cache_dir), tokenizer)


def apply_lora(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """RL on adapters: only LoRA weights train; the engine receives merged weights."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - extra not installed
        raise ImportError("model.lora.enabled needs peft: pip install 'agentrl[lora]'") from e
    targets: list[str] | str = list(cfg.lora.target_modules)
    if targets in (["all-linear"], ["all_linear"]):
        targets = "all-linear"
    lcfg = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    if cfg.gradient_checkpointing and hasattr(model, "enable_input_require_grads"):
        # Frozen embeddings + checkpointing would otherwise give adapters no gradient.
        hf: Any = model  # a transformers PreTrainedModel
        hf.enable_input_require_grads()
    return get_peft_model(model, lcfg)


def plain_model(model: torch.nn.Module) -> torch.nn.Module:
    """A plain transformers model with the policy's current weights: a peft wrapper is
    copied and merged (adapters folded in, HF parameter names); anything else is returned."""
    if hasattr(model, "merge_and_unload"):
        peft_model: Any = copy.deepcopy(model)  # a peft PeftModel
        merged: torch.nn.Module = peft_model.merge_and_unload()
        return merged
    plain: torch.nn.Module = getattr(model, "module", model)
    return plain


def save_pretrained(model: torch.nn.Module, tokenizer: Any, out: str | Path) -> Path:
    """Write an HF checkpoint directory (config, safetensors, tokenizer + chat template) that
    `model.path` accepts; LoRA adapters are merged so no peft is needed to load it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain: Any = plain_model(model)  # a transformers PreTrainedModel
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradient-checkpointing / generation-config chatter
        plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
