"""The wheel's contents are an explicit list in pyproject.toml ([tool.setuptools]): `envs/`,
`tools/`, `sandboxes/` and `configs/` install as `agentrl.*` through `package-dir`, and
setuptools cannot discover packages under a mapping. These tests keep the list true to the
tree, so a new subpackage or data file cannot be silently left out of a non-editable install
(the editable one would still work, which is how such a hole goes unseen)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]


def _folder(package: str) -> Path:
    """Where setuptools looks for `package`: its own mapping, else its nearest mapped parent's."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in PACKAGE_DIR:
            return REPO / PACKAGE_DIR[head] / Path(*parts[i:])
    return REPO / Path(*parts)


def _on_disk() -> dict[str, Path]:
    """Every folder with an `__init__.py` under the mapped roots, by its installed name."""
    found = {}
    for root, folder in PACKAGE_DIR.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found[".".join((root, *rel.parts))] = init.parent
    return found


def test_everything_installs_under_agentrl() -> None:
    """No bare `envs`/`tools` top-level package: those names belong to other projects."""
    assert all(p == "agentrl" or p.startswith("agentrl.") for p in SETUPTOOLS["packages"])
    assert all(p == "agentrl" or p.startswith("agentrl.") for p in PACKAGE_DIR)


def test_every_package_folder_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    missing = sorted(set(_on_disk()) - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    gone = sorted(p for p in listed if not (_folder(p) / "__init__.py").is_file())
    assert not gone, f"listed in pyproject.toml but not on disk: {gone}"


def test_every_data_file_is_package_data() -> None:
    """Each non-Python file under a package folder matches a package-data glob of the package
    that holds it (its nearest folder with an `__init__.py`)."""
    data: dict[str, list[str]] = SETUPTOOLS["package-data"]
    packages = _on_disk()
    shipped: set[Path] = set()
    for name, folder in packages.items():
        for pattern in data.get("*", []) + data.get(name, []):
            shipped.update(p.resolve() for p in folder.glob(pattern) if p.is_file())
    left_out = set()
    for folder in packages.values():
        for f in folder.rglob("*"):
            if not f.is_file() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
                continue
            if f.resolve() not in shipped:
                left_out.add(str(f.relative_to(REPO)))
    assert not left_out, f"not in [tool.setuptools.package-data]: {sorted(left_out)}"
