"""Tiny random-init Qwen2-VL / Qwen2.5-VL / Qwen3-VL with locally built processors: the vision
stack's test models.

`model.path: tiny-vlm:<preset>` resolves here (presets `qwen2_vl`, `qwen2_5_vl`, `qwen3_vl`,
named after transformers' `model_type`). Like `tiny:` presets, nothing is downloaded: the text
tokenizer is agentrl's locally trained tiny BPE, extended with the Qwen vision special tokens
(`<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>`, `<|video_pad|>`), and its chat template
renders image content parts the way Qwen's templates do (one `<|image_pad|>` per image, expanded
later to the image's token count). The image processor is the one all three families ship
(Qwen2-VL's, PIL backend so torchvision is not needed) with a small fixed pixel budget, so CPU
tests stay fast while exercising the code paths of a real checkpoint: 3D M-RoPE, multi-image
sequences, and per family Qwen2.5-VL's windowed vision attention or Qwen3-VL's deepstack and
interleaved M-RoPE.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .tiny import FORMAT_VERSION, VOCAB_SIZE, cache_root, train_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]

# Same hermes-style tool template as `tiny.CHAT_TEMPLATE`, but every content is rendered by a
# macro that also accepts a list of parts: an image part becomes a vision placeholder.
VLM_CHAT_TEMPLATE = (
    "{% macro render(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}"
    "{% if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ render(messages[0].content) }}\n{% endif %}"
    "Tools:\n{% for t in tools %}{{ t.function | tojson }}\n{% endfor %}"
    'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n"
    "{{ render(messages[0].content) }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ render(m.content) }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>tool\n<tool_response>{{ render(m.content) }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ render(m.content) }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Shared by every preset: head_dim = 64 / 4 = 16, so the M-RoPE sections (t, h, w) sum to 8.
_TEXT: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
}

# arch -> (transformers config class, model class, the vision config key set to the LM width).
ARCHS: dict[str, tuple[str, str, str]] = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", "hidden_size"),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", "out_hidden_size"),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", "out_hidden_size"),
}

PRESETS: dict[str, dict[str, Any]] = {
    "qwen2_vl": {
        "arch": "qwen2_vl",
        "text": _TEXT,
        "vision": {
            "depth": 1,
            "embed_dim": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        "max_pixels": 56 * 56,
    },
    # Qwen2.5-VL's tower alternates windowed and full attention. A window is
    # window_size / patch / merge = 2x2 merged tokens and images are 112x112 (4x4 merged
    # tokens, 16 per image), so block 0 attends within 4 windows whose token order differs
    # from the raster order (a non-trivial window permutation); block 1 attends fully.
    "qwen2_5_vl": {
        "arch": "qwen2_5_vl",
        "text": _TEXT,
        "vision": {
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        "max_pixels": 112 * 112,
    },
    # Qwen3-VL: patch 16, a learned 4x4 position grid interpolated to each image, deepstack
    # features from vision block 0 added into the first LM layer, interleaved M-RoPE.
    "qwen3_vl": {
        "arch": "qwen3_vl",
        "text": dict(
            _TEXT,
            head_dim=16,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5e5,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        ),
        "vision": {
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [0],
        },
        "max_pixels": 64 * 64,
        "processor": {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]},
    },
}
_VLM_FORMAT_VERSION = 1


def build_tokenizer() -> Any:
    """The tiny text tokenizer plus the vision special tokens and the image-aware template."""
    tok = train_tokenizer()
    tok.add_tokens(list(VISION_TOKENS), special_tokens=True)
    tok.chat_template = VLM_CHAT_TEMPLATE
    return tok


def model_config(preset: str, tokenizer: Any) -> Any:
    """The preset's transformers config, with the tokenizer's vocab and vision token ids."""
    import transformers

    if preset not in PRESETS:
        raise ValueError(f"unknown tiny-vlm preset {preset!r}; known: {sorted(PRESETS)}")
    p = PRESETS[preset]
    config_cls, _, width_key = ARCHS[p["arch"]]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    text = dict(
        p["text"],
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    vision = dict(p["vision"], **{width_key: p["text"]["hidden_size"]})
    return getattr(transformers, config_cls)(
        text_config=text,
        vision_config=vision,
        vision_start_token_id=ids["<|vision_start|>"],
        image_token_id=ids["<|image_pad|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        video_token_id=ids["<|video_pad|>"],
        tie_word_embeddings=True,
    )


def image_processor(preset: str) -> Any:
    """Qwen2-VL's PIL image processor (Qwen2.5-VL and Qwen3-VL checkpoints ship the same one,
    Qwen3-VL with patch 16 and mean/std 0.5) with the preset's pixel cap (min == max keeps
    every image at one small, fixed budget)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    p = PRESETS[preset]
    v = p["vision"]
    return Qwen2VLImageProcessorPil(
        min_pixels=p["max_pixels"],
        max_pixels=p["max_pixels"],
        patch_size=v["patch_size"],
        merge_size=v["spatial_merge_size"],
        temporal_patch_size=v["temporal_patch_size"],
        **p.get("processor", {}),
    )


def build_tiny_vlm(preset: str = "qwen2_vl", cache_dir: str | None = None, seed: int = 0) -> Path:
    """Build (or reuse) a tiny VLM checkpoint directory: config, weights, tokenizer with chat
    template, and `preprocessor_config.json`. Cached by content hash like `build_tiny`."""
    import torch
    import transformers

    key = json.dumps(
        [preset, PRESETS.get(preset), VLM_CHAT_TEMPLATE, VOCAB_SIZE, seed, FORMAT_VERSION]
        + [_VLM_FORMAT_VERSION]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    out = cache_root(cache_dir) / f"tiny-vlm-{preset}-{digest}"
    if (out / "config.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tokenizer = build_tokenizer()
    config = model_config(preset, tokenizer)
    torch.manual_seed(seed)
    model = getattr(transformers, ARCHS[PRESETS[preset]["arch"]][1])(config)
    tokenizer.save_pretrained(tmp)
    image_processor(preset).save_pretrained(tmp)
    model.save_pretrained(tmp)
    if not out.exists():
        tmp.rename(out)
    return out
