"""A tiny random-init Qwen2-VL with a locally built processor: the vision stack's test model.

`model.path: tiny-vlm:qwen2_vl` resolves here. Like `tiny:` presets, nothing is downloaded:
the text tokenizer is agentrl's locally trained tiny BPE, extended with Qwen2-VL's vision
special tokens (`<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>`, `<|video_pad|>`), and
its chat template renders image content parts the way Qwen2-VL's does (one `<|image_pad|>` per
image, expanded later to the image's token count). The image processor is Qwen2-VL's own
(PIL backend, so torchvision is not needed) capped at 56x56 pixels: with patch 14 and merge 2
every image costs at most 4 placeholder tokens, which keeps CPU tests fast while exercising
the same code paths (3D M-RoPE, multi-image sequences) as a real checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .tiny import _FORMAT_VERSION, VOCAB_SIZE, _cache_root, train_tokenizer

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

# head_dim = 64 / 4 = 16, so the M-RoPE sections (t, h, w) must sum to 8.
PRESETS: dict[str, dict[str, Any]] = {
    "qwen2_vl": {
        "text": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "mrope_section": [2, 3, 3],
            },
        },
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
}
_VLM_FORMAT_VERSION = 1


def build_tokenizer() -> Any:
    """The tiny text tokenizer plus the vision special tokens and the image-aware template."""
    tok = train_tokenizer()
    tok.add_tokens(list(VISION_TOKENS), special_tokens=True)
    tok.chat_template = VLM_CHAT_TEMPLATE
    return tok


def model_config(preset: str, tokenizer: Any) -> Any:
    from transformers import Qwen2VLConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown tiny-vlm preset {preset!r}; known: {sorted(PRESETS)}")
    p = PRESETS[preset]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    text = dict(
        p["text"],
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    vision = dict(p["vision"], hidden_size=p["text"]["hidden_size"])
    return Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        vision_start_token_id=ids["<|vision_start|>"],
        image_token_id=ids["<|image_pad|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        video_token_id=ids["<|video_pad|>"],
        tie_word_embeddings=True,
    )


def image_processor(preset: str) -> Any:
    """Qwen2-VL's PIL image processor with the preset's pixel cap (min == max keeps every
    image at one small, fixed budget)."""
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
    )


def build_tiny_vlm(preset: str = "qwen2_vl", cache_dir: str | None = None, seed: int = 0) -> Path:
    """Build (or reuse) a tiny VLM checkpoint directory: config, weights, tokenizer with chat
    template, and `preprocessor_config.json`. Cached by content hash like `build_tiny`."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    key = json.dumps(
        [preset, PRESETS.get(preset), VLM_CHAT_TEMPLATE, VOCAB_SIZE, seed, _FORMAT_VERSION]
        + [_VLM_FORMAT_VERSION]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    out = _cache_root(cache_dir) / f"tiny-vlm-{preset}-{digest}"
    if (out / "config.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tokenizer = build_tokenizer()
    config = model_config(preset, tokenizer)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    tokenizer.save_pretrained(tmp)
    image_processor(preset).save_pretrained(tmp)
    model.save_pretrained(tmp)
    if not out.exists():
        tmp.rename(out)
    return out
