"""Which `model.path` values name files on this machine, and the one error for a missing one.

Why in models/: what a model path means (a `tiny:` preset, a GGUF preset, a hub id
`owner/name`, or a local checkpoint) is the model loader's knowledge. The config check of the
commands that load a model (`agentrl.assembly.validate`, `local_files=True`) and the loader's
own check for the Python API (`agentrl.models.load`) both ask here, so a typo in a local path
is one config error line, not a long loader traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.config import ConfigError


def missing_model_file(key: str, path: str, src: str) -> None:
    """ConfigError if `path` (the value of `key`) is meant as a local file and is not there."""
    if looks_local(path) and not Path(path).expanduser().exists():
        raise ConfigError(
            f"{src}: {key}: {path!r}: no such file or directory (expected a checkpoint "
            f"folder, a .gguf file, tiny:<preset> or a hub id owner/name)"
        )


def looks_local(path: str) -> bool:
    """Whether `model.path` can only mean a file or folder on this machine (absolute, ./, ../,
    ~, a .gguf file, or nested deeper than a hub id's owner/name), so a typo in it is a
    config error, not a long loader traceback. Presets and `owner/name` ids are left alone."""
    from agentrl.models.gguf import PRESETS as GGUF_PRESETS

    if "://" in path or path.startswith(("tiny:", "tiny-vlm:")) or path in GGUF_PRESETS:
        return False
    if os.path.isabs(path) or path.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    if path in (".", "..") or path.lower().endswith(".gguf"):
        return True
    return path.count("/") >= 2 or (os.sep != "/" and os.sep in path)


def unreachable_model(key: str, path: str, error: OSError) -> ConfigError:
    """The one line for a hub id that could not be loaded (no network, no such repository, a
    gated one): what `transformers` raises is a long traceback ending in an `OSError`."""
    from agentrl.models.gguf import PRESETS as GGUF_PRESETS

    first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), type(error).__name__)
    return ConfigError(
        f"{key}: {path!r} is not a folder here, and loading it as a hub id failed ({first[:200]}); "
        f"pass a local checkpoint folder, a .gguf file, a preset ({', '.join(GGUF_PRESETS)}) "
        f"or tiny:<preset>"
    )
