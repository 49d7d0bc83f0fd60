"""Which source changes the SWE grader accepts: repairs that cannot reflect (an allowlist).

Why an allowlist: the package code runs inside pytest's process (the hidden tests call it), so
code that can reach the interpreter can rewrite any verdict that process produces, whoever
writes the report: patch the report plugin or pytest, replace the test function, return a
value whose ``__eq__`` is always true, spawn a process that edits files later. No process
split fixes that, because the test and the code under test share one address space. And a
denylist of reflective spellings cannot be complete (round 3 of the red team found names a
file already imports, fullwidth identifiers that Python folds to ASCII, private module
aliases such as ``random._os``). So instead of listing what is forbidden, this module
defines the small language a repair of an injected bug is written in and refuses the rest.

The rules, on the syntax tree of the agent's file (parsed from its bytes as the import
system reads them, so every spelling is normalised first) against the buggy and the
pristine versions of the same file:

* **Same skeleton.** With function bodies left out, the module is unchanged: no new or changed
  import, module- or class-level statement, definition, decorator, signature or default.
* **Old code is free, new code is plain.** Inside a function, a statement or expression that
  already exists (same tree) in that function's buggy or pristine version is accepted as is
  (so restoring the original, the oracle, always passes). Anything new may only use:
  constants, operators, comparisons, conditionals, containers, comprehensions, subscripts,
  ``if``/``for``/``while``/``return``/``raise``/assignments, and names that are the function's
  (or an enclosing function's) parameters or locals, the module's own ``def``s and classes, or
  a fixed set of plain builtins (``len``, ``min``, ``ValueError``...; never ``getattr``/``type``/``open``/``vars``
  and the like). An attribute must be one the function already uses and not private.
  A name bound by an import is usable only inside an expression that already exists, and a
  call through an imported name or module may only keep its old arguments. No dunder name
  or attribute, no new ``def``/``class``/``lambda``/``import``/``global``/``try``/``with``.
* **A function that reaches outside keeps its data flow.** Where the old function reads any
  other global (an import, a module-level alias, a reflective builtin) or a dunder, new
  statements may not rebind names, and reflective old expressions stay where they were.

Every construct that could reach past the function's own values (a module, a frame, a class's
internals, the file system, another process) needs a name or attribute outside that set, so
code within it cannot touch the test machinery. Files that do not parse, that declare a source
encoding other than UTF-8, or that grew past 4x their size (+64 KiB) are refused outright.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator

from agentrl.tools.ast_lock import parse

_DUNDER = re.compile(r"^__\w*__$")
_CTX = re.compile(r", ctx=(Load|Store|Del)\(\)")
# The builtins a repair may call or name (everything else in builtins is refused: getattr,
# setattr, delattr, vars, globals, locals, dir, type, object, super, eval, exec, compile, open,
# __import__, breakpoint, input, help, memoryview, classmethod, staticmethod, property, id...).
SAFE_BUILTINS = frozenset(
    "len range min max abs sum any all sorted reversed enumerate zip map filter iter next "
    "int float complex bool str bytes list tuple dict set frozenset slice round divmod pow "
    "isinstance issubclass callable hash repr ord chr hex oct bin format print "
    "True False None NotImplemented Ellipsis "
    "Exception ValueError TypeError KeyError IndexError LookupError AttributeError "
    "ArithmeticError ZeroDivisionError OverflowError RuntimeError NotImplementedError "
    "StopIteration AssertionError UnicodeError UnicodeDecodeError UnicodeEncodeError".split()
)
REFLECTIVE = frozenset(
    "getattr setattr delattr hasattr vars globals locals dir type object super eval exec "
    "compile open __import__ breakpoint input help memoryview classmethod staticmethod "
    "property id exit quit".split()
)
_PLAIN_EXPR = (
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Call,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.Starred,
    ast.Slice,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
_PLAIN_STMT = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Return,
    ast.If,
    ast.For,
    ast.While,
    ast.Break,
    ast.Continue,
    ast.Pass,
    ast.Raise,
)
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
_FUNC = ast.FunctionDef | ast.AsyncFunctionDef


def _dump(node: ast.AST) -> str:
    return _CTX.sub("", ast.dump(node))


def _header(stmt: ast.AST) -> str:
    """The statement without its nested statement lists (a compound's own line)."""
    fields = {f: getattr(stmt, f) for f in stmt._fields if f not in _BODIES}
    return _dump(type(stmt)(**fields))


def _skeleton(tree: ast.Module) -> str:
    """The module with every function body emptied (what must not change)."""
    funcs = [n for n in ast.walk(tree) if isinstance(n, _FUNC)]
    bodies = [f.body for f in funcs]
    try:
        for f in funcs:
            f.body = []
        return _dump(tree)
    finally:
        for f, body in zip(funcs, bodies, strict=True):
            f.body = body


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, def) for every function, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _FUNC | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if isinstance(node, _FUNC):
                yield name, node
            yield from _functions(node, name + ".")
        else:
            yield from _functions(node, prefix)


class _Old:
    """What one function's old versions (buggy, pristine) contain."""

    def __init__(self, funcs: list[ast.AST], imported: set[str], plain: set[str]) -> None:
        self.stmts: set[str] = set()
        self.headers: set[str] = set()
        self.exprs: set[str] = set()
        self.names = plain  # names new code may use: locals, own defs and classes
        self.attrs: set[str] = set()
        self.reflects = False  # reads a global that is not its module's own def or class
        for f in funcs:
            for node in ast.walk(f):
                if node is f:
                    continue
                if isinstance(node, ast.stmt):
                    self.stmts.add(_dump(node))
                    self.headers.add(_header(node))
                elif isinstance(node, ast.ExceptHandler | ast.match_case):
                    self.headers.add(_header(node))
                elif isinstance(node, ast.expr):
                    self.exprs.add(_dump(node))
                if isinstance(node, ast.Name):
                    self.reflects |= node.id not in plain and node.id not in SAFE_BUILTINS
                    self.reflects |= node.id in REFLECTIVE or bool(_DUNDER.match(node.id))
                elif isinstance(node, ast.Attribute):
                    self.attrs.add(node.attr)
                    self.reflects |= bool(_DUNDER.match(node.attr))
        self.imported = imported


def _locals(f: ast.AST) -> set[str]:
    """Names a function binds: parameters, assignment targets, nested defs and classes."""
    out: set[str] = set()
    for node in ast.walk(f):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, _FUNC | ast.ClassDef) and node is not f:
            out.add(node.name)
    return out


class _Check:
    """Walks one function's new body; ``hits`` says what is outside the repair language."""

    def __init__(self, path: str, old: _Old, new_locals: set[str]) -> None:
        self.path, self.old, self.locals = path, old, new_locals
        self.hits: list[str] = []

    def bad(self, node: ast.AST, why: str) -> None:
        self.hits.append(f"{self.path}:{getattr(node, 'lineno', '?')}: {why}")

    def stmts(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, s: ast.stmt) -> None:
        if _dump(s) in self.old.stmts:
            return
        if not isinstance(s, _PLAIN_STMT) and _header(s) not in self.old.headers:
            self.bad(s, f"a new {type(s).__name__.lower()} statement")
            return
        if isinstance(s, _PLAIN_STMT) and _header(s) not in self.old.headers:
            for field in s._fields:
                if field in _BODIES:
                    continue
                value = getattr(s, field)
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.expr):
                        self.expr(child)
            for t in _targets(s):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and self.old.reflects:
                        self.bad(n, f"rebinds {n.id!r} in a function that reflects")
        for field in _BODIES:
            for child in getattr(s, field, None) or []:
                if isinstance(child, ast.stmt):
                    self.stmt(child)
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    if _header(child) not in self.old.headers:
                        self.bad(child, "a new except clause or case pattern")
                    self.stmts(child.body)

    def expr(self, e: ast.expr) -> None:
        if isinstance(e, ast.Name):  # a name is judged by what it is bound to, never reused
            self.name(e)
            return
        if _dump(e) in self.old.exprs and not _reflective(e):
            return  # old code in a new place; reflective old code only stays where it was
        if not isinstance(e, _PLAIN_EXPR):
            self.bad(e, f"a new {type(e).__name__.lower()} expression")
            return
        if isinstance(e, ast.Attribute):
            if e.attr.startswith("_") or e.attr not in self.old.attrs:
                self.bad(e, f"attribute .{e.attr} (not one this function uses)")
                return
        if isinstance(e, ast.Call | ast.Attribute | ast.Subscript):
            root = _root(e)
            if isinstance(root, ast.Name) and root.id in self.old.imported:
                self.bad(e, f"new use of the imported name {root.id!r}")
                return
        if isinstance(e, ast.Call):
            for kw in e.keywords:
                if kw.arg is not None and _DUNDER.match(kw.arg):
                    self.bad(e, f"keyword {kw.arg}")
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                self.expr(child)
            elif isinstance(child, ast.comprehension):
                for part in (child.target, child.iter, *child.ifs):
                    self.expr(part)
            elif isinstance(child, ast.keyword):
                self.expr(child.value)

    def name(self, e: ast.Name) -> None:
        n = e.id
        if _DUNDER.match(n) or n in REFLECTIVE:
            self.bad(e, f"the name {n!r}")
        elif n in self.old.imported:
            self.bad(e, f"new use of the imported name {n!r}")
        elif not (n in self.old.names or n in self.locals or n in SAFE_BUILTINS):
            self.bad(e, f"the name {n!r} (not a local, a builtin or a def of this module)")


def _reflective(e: ast.AST) -> bool:
    """Does ``e`` use a reflective builtin or a dunder name or attribute?"""
    for n in ast.walk(e):
        if isinstance(n, ast.Name) and (n.id in REFLECTIVE or _DUNDER.match(n.id)):
            return True
        if isinstance(n, ast.Attribute) and _DUNDER.match(n.attr):
            return True
    return False


def _targets(s: ast.stmt) -> list[ast.expr]:
    if isinstance(s, ast.Assign):
        return list(s.targets)
    if isinstance(s, ast.AugAssign | ast.AnnAssign | ast.For):
        return [s.target]
    return []


def _root(e: ast.expr) -> ast.expr:
    while isinstance(e, ast.Attribute | ast.Subscript | ast.Call):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e


def _imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                out.add(a.asname or a.name.split(".")[0])
    return out


def _decode(data: bytes) -> tuple[str | None, str]:
    """(source text, problem): text as Python's import system will read it."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        return None, f"bad source encoding ({e})"
    if enc not in ("utf-8", "utf-8-sig"):
        return None, f"declares source encoding {enc!r} (only UTF-8 is graded)"
    try:
        return data.decode(enc), ""
    except UnicodeDecodeError as e:
        return None, f"is not valid UTF-8 ({e.reason})"


def _tree(data: bytes | None, path: str) -> ast.Module | None:
    text = _decode(data)[0] if data is not None else None
    try:
        return parse(text, path) if text is not None else None
    except (SyntaxError, ValueError):
        return None


def screen(path: str, new: bytes, pristine: bytes | None, buggy: bytes | None) -> list[str]:
    """Why the agent's version ``new`` of ``path`` is outside the repair language (empty: ok)."""
    limit = 4 * max(len(pristine or b""), len(buggy or b"")) + (64 << 10)
    if len(new) > limit:  # parsing it would cost the host seconds and gigabytes
        return [f"{path}: {len(new)} bytes is too large to grade (limit {limit})"]
    olds, old_funcs, skeletons, old_imported = _analyse(path, pristine, buggy)
    if not olds:
        return [f"{path}: a new source file (a repair changes existing files only)"]
    text, problem = _decode(new)
    if text is None:
        return [f"{path}: {problem}"]
    try:
        tree = parse(text, path)
    except (SyntaxError, ValueError) as e:
        return [f"{path}: does not parse as Python ({e})"]
    try:
        return _check_tree(path, tree, old_funcs, skeletons, old_imported)
    except RecursionError:
        return [f"{path}: nests too deeply to grade"]


def _check_tree(
    path: str,
    tree: ast.Module,
    old_funcs: dict[str, tuple[_Old, set[str]]],
    skeletons: set[str],
    old_imported: frozenset[str],
) -> list[str]:
    if _skeleton(tree) not in skeletons:
        return [f"{path}: changes code outside function bodies (imports, definitions, module code)"]
    if _imported(tree) - old_imported:
        return [f"{path}: a new import"]
    hits: list[str] = []
    for name, f in _functions(tree):
        if name not in old_funcs:  # nested defs are statements of their outer function
            continue
        old, bodies = old_funcs[name]
        body = f.body  # type: ignore[attr-defined]
        if _dump(ast.Module(body, [])) in bodies:
            continue
        stores = {
            n.id for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        check = _Check(path, old, stores)
        check.stmts(body)
        hits += check.hits
    return sorted(set(hits))


@functools.lru_cache(maxsize=64)
def _analyse(
    path: str, pristine: bytes | None, buggy: bytes | None
) -> tuple[list[ast.Module], dict[str, tuple[_Old, set[str]]], set[str], frozenset[str]]:
    """The old versions of one file, analysed once: (trees, per-function facts, skeletons,
    names bound by imports)."""
    olds = [t for t in (_tree(buggy, path), _tree(pristine, path)) if t is not None]
    imported = frozenset().union(*(_imported(t) for t in olds))
    grouped: dict[str, list[ast.AST]] = {}
    defs: set[str] = set()
    for old in olds:
        defs |= {n.name for n in old.body if isinstance(n, _FUNC | ast.ClassDef)}
        for name, f in _functions(old):
            grouped.setdefault(name, []).append(f)
    scopes = {name: set().union(*map(_locals, fs)) for name, fs in grouped.items()}
    funcs = {}
    for name, fs in grouped.items():
        parts = name.split(".")
        enclosing = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        plain = (defs | set().union(*(scopes.get(q, set()) for q in enclosing))) - imported
        bodies = {_dump(ast.Module(f.body, [])) for f in fs}  # type: ignore[attr-defined]
        funcs[name] = (_Old(fs, set(imported), plain), bodies)
    return olds, funcs, {_skeleton(t) for t in olds}, imported
