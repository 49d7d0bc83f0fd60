"""Print the package-level import graph of agentrl/ (for docs/wiring.md).

Why: the wiring doc shows the graph before and after a change; generating it from the code
(with `ast`, nothing is imported) keeps the picture true. Each edge `a -> b (n)` says that
modules of package `agentrl.a` import `agentrl.b` n times, lazy (in-function) imports and
`TYPE_CHECKING` blocks included. Loops between two packages are listed at the end.

Usage: python scripts/import_graph.py  (run from the repository root). The folders `envs/`,
`tools/`, `sandboxes/`, `configs/` install as `agentrl.<folder>` and are read as such.
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path


def package_of(module: str) -> str:
    """`agentrl.trainer.actor` -> `trainer`; top-level modules (`agentrl.types`) keep their name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports(path: Path, module: str) -> list[str]:
    """Every `agentrl.*` module `path` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append(name)
    return [m for m in out if m == "agentrl" or m.startswith("agentrl.")]


# Folder -> the package it installs as (setup.py's mapping).
ROOTS = {"agentrl": "agentrl", "envs": "agentrl.envs", "tools": "agentrl.tools"}
ROOTS |= {"sandboxes": "agentrl.sandboxes", "configs": "agentrl.configs"}


def graph(repo: Path) -> collections.Counter[tuple[str, str]]:
    edges: collections.Counter[tuple[str, str]] = collections.Counter()
    paths = [(p, folder) for folder in ROOTS for p in sorted((repo / folder).rglob("*.py"))]
    for path, folder in paths:
        parts = list(path.relative_to(repo / folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join([ROOTS[folder], *parts])
        src = package_of(module)
        for target in imports(path, module):
            dst = package_of(target)
            if dst != src and dst != "agentrl":
                edges[(src, dst)] += 1
    return edges


def main() -> None:
    edges = graph(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    for (src, dst), n in sorted(edges.items()):
        print(f"{src} -> {dst} ({n})")
    loops = sorted({tuple(sorted(e)) for e in edges if (e[1], e[0]) in edges})
    print("loops:", ", ".join(f"{a} <-> {b}" for a, b in loops) or "none")


if __name__ == "__main__":
    main()
