"""Checks that a tokenizer converted from a GGUF file tokenizes like its vocabulary says.

Why: transformers builds the tokenizer of a GGUF file itself (from the file's token list,
scores and merges), and that conversion has differed between versions. With transformers
5.17.0 the `gemma3-270m` preset converted without error, but its tokenizer split common words
(`the` -> `▁t`, `he`) although `▁the` is one vocabulary entry, and once saved and reloaded it
was character-level, special tokens included (`<start_of_turn>` as 15 ids): the calc prompt
took 863 tokens instead of 224, every episode of the learning-matrix cell ended `max_tokens`
before generating, and the run trained on nothing. Nothing downstream can tell such a
tokenizer from a real one, so the converted directory is checked once, as every role will
load it (saved, then reloaded), and a broken one is an error naming the transformers version.

The checks need nothing but the vocabulary: every special token must encode as its own single
id, and a probe sentence of common English words must encode each word as the one token the
vocabulary has for it (`▁word` in SentencePiece vocabularies, `Ġword` in byte-level ones),
which any correct BPE or unigram tokenizer with those entries does.
"""

from __future__ import annotations

from typing import Any

PROBE = "Use the calculator tool for arithmetic, then answer with the number."
_WORD_MARKS = ("▁", "Ġ")  # SentencePiece's and byte-level BPE's leading-space marks


def tokenizer_problem(tok: Any) -> str | None:
    """What is wrong with `tok` (a transformers tokenizer), or None if it passes."""
    for special in tok.all_special_tokens:
        ids = tok.encode(special, add_special_tokens=False)
        if ids != [tok.convert_tokens_to_ids(special)]:
            return f"special token {special!r} encodes as {len(ids)} ids {ids[:8]}"
    vocab = tok.get_vocab()
    ids = tok.encode(PROBE, add_special_tokens=False)
    for word in PROBE.rstrip(".").replace(",", "").split()[1:]:  # the first has no space
        whole = [vocab[m + word] for m in _WORD_MARKS if m + word in vocab]
        if whole and not set(whole) & set(ids):
            pieces = tok.convert_ids_to_tokens(ids)
            return (
                f"{word!r} is one vocabulary entry but the probe {PROBE!r} encodes as "
                f"{len(ids)} tokens {pieces[:12]}"
            )
    return None


def check_converted(path: Any, source: str) -> None:
    """Load the tokenizer saved at `path` (converted from `source`) as every role will and
    raise a `RuntimeError` naming the transformers version if it is broken."""
    import transformers
    from transformers import AutoTokenizer

    problem = tokenizer_problem(AutoTokenizer.from_pretrained(path))
    if problem is not None:
        raise RuntimeError(
            f"GGUF conversion of {source}: transformers {transformers.__version__} built a "
            f"broken tokenizer ({problem}); prompts would tokenize several times longer. "
            "Use a transformers that converts it correctly (5.25.0 does)"
        )
