"""Tiny random-init models with a locally trained tokenizer and a tool-capable chat template.

No weights or tokenizers are downloaded, ever: `build_tiny(preset)` trains a small BPE
tokenizer on text generated from agentrl's own envs and tool formats, then saves a random-init
transformers model of the preset's architecture beside it, so every code path (engines,
trainers, templates) is exercised on the same files a real checkpoint directory would give.

`model.path: tiny:<preset>` in a config resolves here; the result is cached by content hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# A hermes/Qwen-style template: tools listed in the system turn, calls as
# <tool_call>{"name": ..., "arguments": ...}</tool_call>, results in `tool` turns.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "Tools:\n{% for t in tools %}{{ t.function | tojson }}\n{% endfor %}"
    'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n"
    "{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>tool\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PRESETS: dict[str, dict[str, Any]] = {
    "qwen2": {
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "qwen2-small": {
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    # The GPU quickstart's model (configs/quickstart-gpu.yaml): 4x the width of qwen2-small.
    "qwen2-base": {
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    # Qwen3: per-head q/k RMSNorm and an explicit head_dim.
    "qwen3": {
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "tie_word_embeddings": True,
    },
    # Gemma-2: attention and final-logit soft-capping, alternating sliding/full layers. The
    # window is small on purpose so rollouts of a few dozen tokens cross it.
    "gemma2": {
        "model_type": "gemma2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": 32,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True,
    },
    # DeepSeek-V3 style: multi-head latent attention (MLA) and a routed + shared expert MoE
    # after `first_k_dense_replace` dense layers. qk_nope + qk_rope == v_head_dim keeps key and
    # value cache rows the same width.
    "deepseek_v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "kv_lora_rank": 16,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "routed_scaling_factor": 1.0,
    },
    # Qwen2-MoE: top-k routed experts plus a gated shared expert in every layer.
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
}

# Families a `tiny:` preset stands in for (what `agentrl.models` documents as supported).
FAMILIES = {
    "qwen2": "Qwen2 / Qwen2.5",
    "qwen2-small": "Qwen2 / Qwen2.5",
    "qwen2-base": "Qwen2 / Qwen2.5",
    "llama": "Llama 3.x",
    "qwen3": "Qwen3",
    "gemma2": "Gemma 2",
    "deepseek_v3": "DeepSeek-V3 (MLA + MoE)",
    "qwen2_moe": "Qwen2-MoE / Qwen1.5-MoE",
}

VOCAB_SIZE = 1024
FORMAT_VERSION = 1


def _corpus() -> list[str]:
    """Text the tokenizer is trained on: env prompts, tool calls, answers, common words."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = (
        "What is the answer ? The result of this expression : calculator tool call arguments "
        "name expression Evaluate an arithmetic exactly using parentheses e.g. function return "
        "def import print for in if else while range len list dict str int float True False None "
        "assert search query click type element id page task find number count shape image "
        "error Error invalid unknown could not parse timed out I am not sure Let me compute "
        "You are a helpful assistant . Use the tools to solve the problem , then answer ."
    ).split()
    from agentrl.tools.calculator import calculator
    from agentrl.tools.core import build_schema

    texts = [json.dumps(build_schema(calculator)["function"])] * 50
    for _ in range(4000):
        a, b, c = (int(x) for x in rng.integers(0, 1000, size=3))
        op1, op2 = rng.choice(list("+-*/"), size=2)
        expr = f"{a} {op1} {b} {op2} {c}"
        texts.append(f"What is {expr}?")
        call = json.dumps({"name": "calculator", "arguments": {"expression": expr}})
        texts.append(f"<tool_call>{call}</tool_call>")
        texts.append(f"The answer is {a * b - c}. \\boxed{{{a + c}}}")
        texts.append(" ".join(rng.choice(words, size=12)))
    return texts


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> Any:
    """A byte-level BPE with single-digit tokens (arithmetic stays learnable) and chat tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(preset: str, tokenizer: Any) -> Any:
    from transformers import AutoConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown tiny preset {preset!r}; known: {sorted(PRESETS)}")
    params = dict(PRESETS[preset])
    model_type = params.pop("model_type")
    return AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **params,
    )


def cache_root(cache_dir: str | None) -> Path:
    root = cache_dir or os.environ.get("AGENTRL_CACHE", "~/.cache/agentrl")
    return Path(root).expanduser()


def build_tiny(preset: str = "qwen2", cache_dir: str | None = None, seed: int = 0) -> Path:
    """Build (or reuse) a tiny checkpoint directory; returns its path."""
    import torch
    from transformers import AutoModelForCausalLM

    key = json.dumps([preset, PRESETS.get(preset), CHAT_TEMPLATE, VOCAB_SIZE, seed, FORMAT_VERSION])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    out = cache_root(cache_dir) / f"tiny-{preset}-{digest}"
    if (out / "config.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tokenizer = train_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(preset, tokenizer))
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    tmp.rename(out) if not out.exists() else None
    return out


def resolve_model_path(path: str, cache_dir: str | None = None) -> str:
    """`tiny:<preset>` → a built checkpoint directory; a GGUF file or preset (`agentrl.models.gguf`)
    → its converted directory; anything else is returned unchanged."""
    if path.startswith("tiny:"):
        return str(build_tiny(path.split(":", 1)[1], cache_dir))
    if path.startswith("tiny-vlm:"):  # a tiny Qwen VLM with its processor (see tiny_vlm)
        from .tiny_vlm import build_tiny_vlm

        return str(build_tiny_vlm(path.split(":", 1)[1], cache_dir))
    from .gguf import is_gguf, resolve_gguf

    if is_gguf(path):  # a GGUF file or preset name: converted once to a cached HF directory
        return str(resolve_gguf(path, cache_dir))
    return path
