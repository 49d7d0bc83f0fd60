"""docs/architecture.md matches the tree, both ways: every path and `agentrl.*` module it names
exists, and every room of the core and every public module in one is named there.

Why: the page drifted while code moved (issue 38). When this fails it lists what to change in
the page: a row for a new module, or the new path of a moved one. Names are checked as written
in backticks: a path with a `/` from the repository root (`agentrl/trainer/trainer.py`,
`envs/math/`), a bare private file name beside its module (`_hf_core.py`: some file of that
name exists in the code), or a dotted module (`agentrl.engines.hf`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
MAPPED = {"envs": "envs", "tools": "tools", "sandboxes": "sandboxes", "configs": "configs"}
CODE_ROOTS = ("agentrl", *MAPPED.values())
TOP = ("agentrl/", "envs/", "tools/", "sandboxes/", "configs/", "docs/", "tests/", "benchmarks/")


def _named() -> list[str]:
    return re.findall(r"`([^`\s]+)`", DOC.read_text())


def _real(path: Path) -> bool:
    """A file or folder of this checkout, not one reached through the worktree's mapped-folder
    symlinks (`agentrl/envs` -> `envs/`, which do not exist in an installed tree)."""
    return path.exists() and not any(p.is_symlink() for p in [path, *path.parents])


def _module_path(dotted: str) -> Path | None:
    parts = dotted.split(".")
    if len(parts) > 1 and parts[1] in MAPPED:  # agentrl.envs.x -> envs/x
        parts = [MAPPED[parts[1]], *parts[2:]]
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if _real(candidate):
            return candidate
    return None


def _code_files() -> set[str]:
    names: set[str] = set()
    for root in CODE_ROOTS:
        names |= {p.name for p in (ROOT / root).rglob("*.py") if _real(p)}
    return names


def test_every_module_the_page_names_exists() -> None:
    files = _code_files()
    missing = []
    for name in _named():
        if name.startswith(TOP) and re.fullmatch(r"[\w./-]+", name):
            if not _real(ROOT / name.rstrip("/")):
                missing.append(name)
        elif re.fullmatch(r"\w+\.py", name):
            if name not in files:
                missing.append(name)
        elif re.fullmatch(r"agentrl(\.\w+)+", name):
            if _module_path(name) is None:
                missing.append(name)
    assert not missing, f"docs/architecture.md names what does not exist (moved?): {missing}"


def _rooms() -> list[Path]:
    pkg = ROOT / "agentrl"
    return sorted(p for p in pkg.iterdir() if not p.is_symlink() and (p / "__init__.py").exists())


def test_every_room_and_public_module_is_named() -> None:
    named = set(_named())
    wanted = []
    for room in _rooms():
        rel = room.relative_to(ROOT).as_posix()
        wanted.append(f"{rel}/")
        wanted += [f"{rel}/{p.name}" for p in sorted(room.glob("*.py")) if p.name[0] != "_"]
    for top in ("envs", "tools", "sandboxes"):
        wanted += [f"{top}/{p.name}" for p in sorted((ROOT / top).glob("*.py")) if p.name[0] != "_"]
    wanted += [f"envs/{p.name}/" for p in sorted((ROOT / "envs").iterdir()) if p.is_dir()
               and (p / "__init__.py").exists()]  # fmt: skip
    # A room is named by its heading (`agentrl/trainer/`) or by any of its modules' paths.
    unnamed = [
        w for w in wanted if w not in named and not (w.endswith("/") and any(n.startswith(w) for n in named))
    ]  # fmt: skip
    assert not unnamed, f"add these to docs/architecture.md (a row each): {unnamed}"
