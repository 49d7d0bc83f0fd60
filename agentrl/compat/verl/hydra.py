"""Hydra `defaults:` lists of a verl YAML, composed from the files beside it, or refused.

verl's own `ppo_trainer.yaml` holds little beyond a `defaults:` list (`actor@actor_rollout_ref
.actor: dp_actor`, ...) naming files in its config folder; dropping the list silently
translated a config that was mostly verl's defaults missing. This composes the list the way
Hydra does for these files, from the YAML files beside the one given, without Hydra:

- `name` (a string): `name.yaml` of the including file's folder, at its package;
- `group@pkg: option` / `group: option`: `group/option.yaml` relative to the including file's
  folder (`../optim@optim: fsdp` climbs), at `pkg` (default: the group's last part), relative
  to the including file's package; `group@pkg` without an option is the file `group.yaml`;
- `_self_`: where the file's own keys go (Hydra 1.1+: last when not listed, so they win);
- `override ` and `optional ` prefixes are read; an optional file that is absent, or an
  option `null`, adds nothing.

A user's file that extends verl's (`defaults: [ppo_trainer, _self_]` with `hydra.searchpath`)
finds them in its `hydra.searchpath` folders (`file://`) or in an installed verl's
`verl/trainer/config`. Anything else (a missing file, a `_global_` package, an interpolated
option) is refused with one error naming the entry and the ways out: verl's composed file
(`_generated_ppo_trainer.yaml`, or `python -m verl.trainer.main_ppo --cfg job`), or
`--no-defaults` to translate the file's own keys alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config import ConfigError

COMPOSED_HINT = (
    "pass verl's composed config instead (verl/trainer/config/_generated_ppo_trainer.yaml, "
    "or the output of `python -m verl.trainer.main_ppo --cfg job`), or --no-defaults to "
    "translate this file's own keys without verl's defaults"
)


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, mappings merged key by key (OmegaConf's merge for plain YAML)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def at(package: str, tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` nested under the dotted `package` ('' = the root)."""
    for part in reversed([p for p in package.split(".") if p]):
        tree = {part: tree}
    return tree


def compose(tree: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """`tree` (the parsed file at `path`) with its `defaults:` list composed in; a tree
    without one is returned as is. Raises `ConfigError` for an entry it cannot resolve."""
    if "defaults" not in tree:
        return tree
    return _compose(tree, Path(path).resolve(), "", str(path), 0, search_path(tree))


def search_path(tree: dict[str, Any]) -> list[Path]:
    """Where the top file's entries are also looked for: its `hydra.searchpath` folders
    (`file://`, relative to the working folder) and an installed verl's config folder."""
    import importlib.util

    hydra = tree.get("hydra")
    entries = hydra.get("searchpath", []) if isinstance(hydra, dict) else []
    found = [Path(e.removeprefix("file://")) for e in entries if str(e).startswith("file://")]
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.submodule_search_locations:
        found += [Path(p) / "trainer" / "config" for p in spec.submodule_search_locations]
    return [p for p in found if p.is_dir()]


def _compose(
    tree: dict[str, Any], file: Path, package: str, source: str, depth: int, search: list[Path]
) -> dict:
    if depth > 16:
        raise ConfigError(f"{source}: defaults: nested more than 16 deep (a cycle?)")
    own = {k: v for k, v in tree.items() if k != "defaults"}
    entries = tree.get("defaults") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: defaults: a list is expected, got {type(entries).__name__}")
    if "_self_" not in entries:
        entries = [*entries, "_self_"]
    out: dict[str, Any] = {}
    for entry in entries:
        if entry == "_self_":
            out = merge(out, at(package, own))
            continue
        child = _entry(entry, file, package, source, search)
        if child is None:
            continue
        child_file, child_package = child
        loaded = _read(child_file, source, entry)
        out = merge(out, _compose(loaded, child_file, child_package, source, depth + 1, []))
    return out


def _entry(
    entry: Any, file: Path, package: str, source: str, search: list[Path]
) -> tuple[Path, str] | None:
    """(file, absolute package) of one defaults entry; None for one that adds nothing."""
    optional = False
    if isinstance(entry, str):
        group, option = entry, None
    elif isinstance(entry, dict) and len(entry) == 1:
        group, option = next(iter(entry.items()))
        group = str(group)
    else:
        raise ConfigError(f"{source}: defaults: cannot read entry {entry!r}; {COMPOSED_HINT}")
    for prefix in ("override ", "optional "):
        if group.startswith(prefix):
            optional |= prefix == "optional "
            group = group.removeprefix(prefix)
    group, _, pkg = group.partition("@")
    if option is None and isinstance(entry, dict):
        return None  # `group: null`: nothing chosen
    if "${" in str(option) or pkg.startswith("_global_") or pkg == "_here_":
        raise ConfigError(f"{source}: defaults: cannot resolve {entry!r}; {COMPOSED_HINT}")
    name = f"{group}.yaml" if option is None else f"{group}/{option}.yaml"
    # A plain config name is at this package; a group's option at the group's name.
    rel = pkg if option is None else (pkg or group.rsplit("/", 1)[-1])
    folders = [file.parent, *search]
    target = next((d / name for d in folders if (d / name).exists()), file.parent / name)
    if not target.exists():
        if optional:
            return None
        raise ConfigError(
            f"{source}: defaults: cannot resolve {entry!r} (no file {target}); {COMPOSED_HINT}"
        )
    return target, ".".join(p for p in (package, rel) if p)


def _read(path: Path, source: str, entry: Any) -> dict[str, Any]:
    import yaml

    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: defaults: {entry!r}: {path} is not valid YAML: {e}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{source}: defaults: {entry!r}: {path} is not a YAML mapping")
    return tree
