"""The converted-GGUF cache is keyed by what the conversion depends on, not the file alone:
the transformers version (5.17 converted SmolLM2's tokenizer into a form llguidance misread
and Gemma 3's into a character-level one; 5.25 converts both right) and the sidecar
tokenizer beside the file. A directory converted by another transformers, or before a
sidecar was added or edited, is never reused for this one."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from agentrl.models import gguf


def _cached(cache: Path, src: Path) -> Path:
    """Where resolve_gguf looks for `src`'s conversion now; made to look converted (the
    conversion itself is tests/models/test_gguf_tokenizer.py's)."""
    key = f"{gguf.file_digest(src)}-{gguf.conversion_digest(src)}-v{gguf._FORMAT_VERSION}"
    out = cache / f"gguf-{src.stem.lower()}-{key}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text("{}")
    (out / "agentrl_source.json").write_text(json.dumps({"tokenizer_checked": True}))
    return out


def test_the_key_follows_transformers_and_the_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "files" / "model.gguf"
    src.parent.mkdir()
    src.write_bytes(b"GGUF not parsed here")
    cache = tmp_path / "cache"
    plain = _cached(cache, src)
    assert gguf.resolve_gguf(str(src), str(cache)) == plain

    # The module `import transformers` gives now: transformers can replace its lazy module in
    # sys.modules after this file was imported (it did, after tests/models/test_gemma3.py).
    transformers = importlib.import_module("transformers")
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert gguf.conversion_digest(src) not in plain.name
    other = _cached(cache, src)
    assert gguf.resolve_gguf(str(src), str(cache)) == other != plain
    monkeypatch.undo()

    sidecar = gguf.tokenizer_sidecar(src)
    sidecar.mkdir()
    (sidecar / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    with_sidecar = gguf.conversion_digest(src)
    assert with_sidecar not in plain.name
    (sidecar / "tokenizer.json").write_text('{"model": {"type": "BPE", "byte_fallback": true}}')
    assert gguf.conversion_digest(src) != with_sidecar
    edited = _cached(cache, src)
    assert gguf.resolve_gguf(str(src), str(cache)) == edited
    assert len({plain, other, edited}) == 3
