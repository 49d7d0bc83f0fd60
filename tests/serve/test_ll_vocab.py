"""llguidance's view of a tokenizer (`agentrl.serve._ll_vocab`), on the tokenizer JSON that
transformers 5.17's GGUF conversion writes for a byte-level BPE: byte_fallback on and a
sentencepiece-style decoder sequence ending in ByteLevel (SmolLM2 on the GPU machine, where
every forced call of 128 agent runs failed with "grammar rejected token 476"). Built here
from the tiny byte-level tokenizer, so the test needs no converted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from agentrl.chat import ChatFormat
from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema

llguidance_hf = pytest.importorskip(
    "llguidance.hf", reason="constrained decoding needs the serve extra"
)

from agentrl.serve import constrain  # noqa: E402
from agentrl.serve._ll_vocab import PROBE, ll_tokenizer, reads_alike  # noqa: E402
from agentrl.serve.request import RequestError  # noqa: E402

# transformers 5.17's decoder for a converted byte-level BPE (read off the GPU machine's copy).
MIXED_DECODER = {
    "type": "Sequence",
    "decoders": [
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    ],
}


def _variant(base: Any, tmp: Path, **edit: Any) -> Any:
    """`base` saved with its tokenizer.json edited (`byte_fallback`, `decoder`, `normalizer`)
    and loaded back, as a converted checkpoint would be."""
    base.save_pretrained(tmp)
    spec = json.loads((tmp / "tokenizer.json").read_text())
    if "byte_fallback" in edit:
        spec["model"]["byte_fallback"] = edit.pop("byte_fallback")
    spec.update(edit)
    (tmp / "tokenizer.json").write_text(json.dumps(spec))
    return PreTrainedTokenizerFast.from_pretrained(
        tmp
    )  # the JSON as written (GGUF conversions load so)


@pytest.fixture
def base(served_model: Any) -> Any:
    """The tiny agent model's tokenizer (byte-level BPE, `<tool_call>` a special token)."""
    return served_model[1].tokenizer


def test_the_mixed_decoder_misleads_llguidance_and_is_read_right(base: Any, tmp_path: Path) -> None:
    mixed = _variant(base, tmp_path, byte_fallback=True, decoder=MIXED_DECODER)
    assert mixed.decode(mixed.encode(PROBE, add_special_tokens=False)) == PROBE  # HF reads it
    plain = llguidance_hf.from_tokenizer(mixed, eos_token=mixed.eos_token_id)
    assert not reads_alike(plain, mixed)  # the bug, reproduced
    assert reads_alike(ll_tokenizer(mixed, mixed.eos_token_id), mixed)
    assert reads_alike(ll_tokenizer(base, base.eos_token_id), base)  # an ordinary one as it was


def test_a_forced_call_under_the_mixed_decoder_takes_the_models_own_tokens(
    base: Any, tmp_path: Path
) -> None:
    """The grammar accepts the tokenizer's own tokens for a valid call (` "` as one token, as
    SmolLM2 writes it), which the unchecked view rejected."""
    mixed = _variant(base, tmp_path, byte_fallback=True, decoder=MIXED_DECODER)
    chat = ChatFormat(mixed, tool_format="hermes")
    grammar = constrain.tool_call_grammar(chat, [build_schema(calculator)], parallel=False)
    text = (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 7"}}\n</tool_call>'
    )
    c = constrain.GrammarConstraint(grammar, chat)
    assert all(c.matcher.consume_token(t) for t in chat.encode(text)), c.matcher.get_error()
    assert c.matcher.is_accepting()


def test_a_vocabulary_llguidance_cannot_read_is_one_clear_error(base: Any, tmp_path: Path) -> None:
    """A tokenizer whose ids do not spell their text (a lowercasing normalizer) is refused by
    name, not given a wrong mask."""
    lower = _variant(base, tmp_path, normalizer={"type": "Lowercase"})
    with pytest.raises(RequestError, match="constrained decoding: llguidance reads this"):
        constrain.check_grammar("start: /[a-z]+/", ChatFormat(lower), "tool_choice")
