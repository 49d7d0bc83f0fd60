"""Hidden tests out of the workspace: each removed where it is defined, base classes followed.

Why follow bases: a node id names the class a test is *collected* from, not where its code
is. cachetools' suites define most tests in mixins (``tests/__init__.py``'s
``CacheTestMixin``) that each ``tests/test_<cache>.py`` class inherits; removing
``test_x`` from ``RRCacheTest``'s file removed nothing, and the agent could read and run
the hidden test. So a ``file::Class::test`` id is resolved like Python's attribute lookup:
the class, then its bases in order, through ``from . import Mixin``-style imports inside the
repo, and the definition is cut from the file that holds it. Removing a mixin's test removes it
from every class that inherits it (the agent sees fewer tests, never a hidden one).
``grade.collect`` and a test check the result: the visible suite collects no hidden node id.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Mapping

from agentrl.tools.ast_lock import parse

Key = tuple[str, tuple[str, ...]]  # (file, (Class, ..., function))


def hidden_defs(
    tree: Mapping[str, bytes], node_ids: tuple[str, ...], roots: tuple[str, ...] = ("",)
) -> dict[str, set[tuple[str, ...]]]:
    """file -> the definition paths to cut, for the tests named by ``node_ids``."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for node in node_ids:
        file, *names = node.split("::")
        path = tuple(n.split("[", 1)[0] for n in names)
        where = _locate(tree, file, path, roots, set()) if len(path) > 1 else None
        f, p = where or (file, path)
        out.setdefault(f, set()).add(p)
    return out


def _module(tree: Mapping[str, bytes], file: str) -> ast.Module | None:
    try:
        return parse(tree[file].decode("utf-8"), file) if file in tree else None
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _locate(
    tree: Mapping[str, bytes], file: str, path: tuple[str, ...], roots: tuple[str, ...], seen: set
) -> Key | None:
    """Where the function ``path[-1]`` that class ``path[:-1]`` of ``file`` resolves to is."""
    if (file, path) in seen:
        return None
    seen.add((file, path))
    mod = _module(tree, file)
    if mod is None:
        return None
    body: list[ast.stmt] = mod.body
    cls: ast.ClassDef | None = None
    for name in path[:-1]:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            return None
        body = cls.body
    assert cls is not None
    func = path[-1]
    if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == func for n in body):
        return file, path
    for base in cls.bases:
        if not isinstance(base, ast.Name):
            continue
        if any(isinstance(n, ast.ClassDef) and n.name == base.id for n in mod.body):
            found = _locate(tree, file, (base.id, func), roots, seen)
        else:
            found = None
            for src, name in _imported_from(mod, file, base.id, roots, tree):
                found = found or _locate(tree, src, (name, func), roots, seen)
        if found:
            return found
    return None


def _imported_from(
    mod: ast.Module, file: str, name: str, roots: tuple[str, ...], tree: Mapping[str, bytes]
) -> list[tuple[str, str]]:
    """(file in the repo, original name) for a top-level ``from X import name [as ...]``."""
    out = []
    for node in mod.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            if node.level:
                base = posixpath.dirname(file)
                for _ in range(node.level - 1):
                    base = posixpath.dirname(base)
                bases = [base]
            else:
                bases = list(roots)
            rel = (node.module or "").replace(".", "/")
            for b in bases:
                stem = posixpath.join(b, rel) if rel else b
                for cand in (f"{stem}.py", posixpath.join(stem, "__init__.py")):
                    if cand in tree:
                        out.append((cand, alias.name))
    return out


def strip(source: str, paths: set[tuple[str, ...]]) -> str:
    """Remove the test functions named by ``paths`` (``(Class, func)`` or ``(func,)``)."""
    lines = source.splitlines(keepends=True)
    cuts: list[tuple[int, int, str]] = []

    def walk(body: list[ast.stmt], prefix: tuple[str, ...], indent: str) -> None:
        kept = 0
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, (*prefix, node.name), " " * (node.col_offset + 4))
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and (*prefix, node.name) in paths
            ):
                start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
                cuts.append((start, node.end_lineno or node.lineno, ""))
            else:
                kept += 1
        if prefix and kept == 0 and body:
            cuts.append((body[-1].end_lineno or 0, body[-1].end_lineno or 0, indent + "pass\n"))

    walk(parse(source).body, (), "")
    for start, end, filler in sorted(cuts, reverse=True):
        lines[start:end] = [filler] if filler else []
    return "".join(lines)
