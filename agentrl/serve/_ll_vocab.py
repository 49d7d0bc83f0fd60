"""llguidance's view of a tokenizer's vocabulary, checked against the tokenizer itself.

A grammar mask is only as right as the bytes llguidance believes each token stands for. It
reads them from the tokenizer's JSON and guesses the byte encoding from it, and one JSON that
transformers writes misleads it: 5.17's GGUF conversion of a byte-level BPE (SmolLM2) keeps
the byte-level pre-tokenizer but sets `byte_fallback` and a sentencepiece-style decoder
sequence (ByteFallback, Fuse, Replace "▁", ByteLevel). transformers decodes it right (the
ByteLevel step wins), llguidance takes it for sentencepiece and reads `Ġ"` as the bytes
`\\xc4\\xa0"` instead of ` "`. Every mask was then wrong, and the first forced call failed
with "grammar rejected token 476" (seen on the GPU machine: 128 of 128 agent runs).

So the view is built, then checked on a probe text (what the tokenizer's ids for it decode to
under llguidance must be the probe's bytes); a byte-level tokenizer that fails is rebuilt
from its JSON with the byte-level reading made explicit; one that still fails is an error
that names the problem, never a silent wrong mask.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# ASCII words and punctuation, JSON, a newline and indent, two- and three-byte characters.
PROBE = 'Hello, world! {"expression": "12 * (3 + 4)"}\n  über 東京'


class VocabMismatch(ValueError):
    """llguidance reads the tokenizer's tokens as other bytes than the tokenizer does."""


def ll_tokenizer(tokenizer: Any, eos: int | None) -> Any:
    """An `llguidance.LLTokenizer` whose bytes per token agree with `tokenizer` on PROBE."""
    import llguidance
    import llguidance.hf

    ll = llguidance.hf.from_tokenizer(tokenizer, eos_token=eos)
    if reads_alike(ll, tokenizer):
        return ll
    spec = _byte_level_spec(tokenizer)
    if spec is not None:
        rebuilt = llguidance.LLTokenizer(spec, eos_token=eos)
        if reads_alike(rebuilt, tokenizer):
            return rebuilt
    ids = tokenizer.encode(PROBE, add_special_tokens=False)[:8]
    seen = [ll.decode_bytes([i]) for i in ids]
    raise VocabMismatch(
        f"llguidance reads this tokenizer's tokens as other bytes than it does (ids {ids} "
        f"are {seen} to llguidance, but {tokenizer.convert_ids_to_tokens(ids)} decode to "
        f"{PROBE[:20]!r}...): its masks would be wrong, so constrained decoding is off for it"
    )


def reads_alike(ll: Any, tokenizer: Any) -> bool:
    """Whether llguidance's bytes for the tokenizer's ids of PROBE are PROBE (a prefix space,
    which sentencepiece adds and its decoder strips, aside)."""
    ids = tokenizer.encode(PROBE, add_special_tokens=False)
    got = bytes(ll.decode_bytes(ids))
    return got.removeprefix(b" ") == PROBE.encode()


def _byte_level_spec(tokenizer: Any) -> str | None:
    """The tokenizer's JSON with a byte-level reading made explicit (no byte fallback, the
    ByteLevel decoder alone), or None when it does not pre-tokenize byte-level."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    backend = copy.copy(backend)
    backend.no_padding()
    backend.no_truncation()
    spec = json.loads(backend.to_str())
    if not _has_byte_level(spec.get("pre_tokenizer")):
        return None
    spec["model"]["byte_fallback"] = False
    spec["decoder"] = {
        "type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True
    }  # fmt: skip
    return json.dumps(spec)


def _has_byte_level(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    if node.get("type") == "ByteLevel":
        return True
    return any(_has_byte_level(n) for n in node.get("pretokenizers") or [])
