"""The converted-tokenizer check (`agentrl.models.gguf_tokenizer`): a tokenizer whose merges
are lost (what transformers 5.17.0 made of the `gemma3-270m` GGUF once saved and reloaded:
character level, 863 prompt tokens instead of 224) is refused with one error naming the
transformers version; the same vocabulary with its merges, and the real converted presets
where installed, pass; a tokenizer saved beside the GGUF replaces the file's conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentrl.models import gguf
from agentrl.models.gguf_tokenizer import PROBE, check_converted, tokenizer_problem


def _bpe(with_merges: bool) -> PreTrainedTokenizerFast:
    """A real SentencePiece-style BPE over the probe's characters plus `▁the`."""
    chars = sorted(set(PROBE.replace(" ", "")) | {"▁"})
    vocab = {c: i for i, c in enumerate(["<unk>", "<eos>", *chars, "▁t", "▁th", "▁the"])}
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e")] if with_merges else []
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def test_lost_merges_are_refused_and_intact_ones_pass(tmp_path: Path) -> None:
    assert tokenizer_problem(_bpe(with_merges=True)) is None
    problem = tokenizer_problem(_bpe(with_merges=False))
    assert problem is not None and "'the' is one vocabulary entry" in problem
    _bpe(with_merges=False).save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match=r"x\.gguf: transformers \S+ built a broken tokenizer"):
        check_converted(tmp_path, "x.gguf")


@pytest.mark.parametrize("preset", sorted(gguf.PRESETS))
def test_converted_presets_pass(preset: str, agentrl_cache: Path) -> None:
    try:
        path = gguf.resolve_gguf(preset, str(agentrl_cache))
    except (FileNotFoundError, ImportError) as e:
        pytest.skip(str(e))
    check_converted(path, preset)


@pytest.mark.slow  # converts the real SmolLM2 GGUF twice (~40 s); CI's slow stage runs it
def test_sidecar_tokenizer_replaces_the_gguf_conversion(tmp_path: Path) -> None:
    """A `<stem>.tokenizer/` folder beside a GGUF (what `save_tokenizer` writes where the
    conversion is correct, carried to a machine whose transformers converts it wrong) is the
    converted model's tokenizer, checked like a converted one; a broken one is refused
    before the weights are touched."""
    try:
        real = gguf.preset_file("smollm2-135m-instruct")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    pytest.importorskip("gguf")
    src = tmp_path / "files" / "model.gguf"
    src.parent.mkdir()
    src.symlink_to(real)
    sidecar = gguf.save_tokenizer(str(src))
    assert sidecar == tmp_path / "files" / "model.tokenizer"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(sidecar)
    tok.add_special_tokens({"additional_special_tokens": ["<carried_here>"]})
    tok.save_pretrained(sidecar)  # a mark only the sidecar has
    out = gguf.resolve_gguf(str(src), str(tmp_path / "cache"))
    meta = json.loads((out / "agentrl_source.json").read_text())
    assert meta["tokenizer"] == str(sidecar) and meta["chat_template"] == "gguf"
    converted = AutoTokenizer.from_pretrained(out)
    assert converted.encode("<carried_here>", add_special_tokens=False) == [len(tok) - 1]
    assert converted.chat_template == tok.chat_template  # the GGUF's ChatML, kept

    _bpe(with_merges=False).save_pretrained(sidecar)  # what 5.17.0 made of Gemma's
    with pytest.raises(RuntimeError, match="model.gguf: transformers .* broken tokenizer"):
        gguf.convert(src, tmp_path / "cache" / "again")
    assert not (tmp_path / "cache" / "again").exists()
