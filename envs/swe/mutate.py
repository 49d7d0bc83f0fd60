"""Bug injection by source mutation, SWE-smith style: small, local, realistic bugs.

Why AST positions and not ``ast.unparse`` of the whole module: the mutated file must look like
the original everywhere except at the bug (a diff of one line or one statement), so an agent
that reads the file sees the project's own formatting and the reverse patch is tiny. Each
mutation replaces exactly one node's source segment:

* ``binop``      ``a + b`` -> ``(a - b)`` (and ``-``/``+``, ``*``/``//``, ``//``/``*``)
* ``compare``    ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``,
                 ``is`` <-> ``is not``
* ``boolop``     ``and`` <-> ``or``
* ``off_by_one`` an integer literal ``n`` -> ``n + 1`` (never in slices' step or defaults)
* ``return``     ``return X`` -> ``return None`` (X not already ``None``)
* ``branch``     an ``if`` without ``else`` -> ``pass`` (the branch is removed)
* ``negate``     ``not x`` -> ``x``

Sites are enumerated in a stable order, so a seed picks the same mutations on every machine.
Only code inside function bodies is mutated (module-level code would break imports rather than
behaviour).
"""

from __future__ import annotations

import ast
import dataclasses

from agentrl.tools.ast_lock import parse

_BINOP_SWAP = {ast.Add: "-", ast.Sub: "+", ast.Mult: "//", ast.FloorDiv: "*"}
_CMP_SWAP = {
    ast.Lt: "<=",
    ast.LtE: "<",
    ast.Gt: ">=",
    ast.GtE: ">",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.In: "not in",
    ast.NotIn: "in",
    ast.Is: "is not",
    ast.IsNot: "is",
}
KINDS = ("binop", "compare", "boolop", "off_by_one", "return", "branch", "negate")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One bug: replace ``source[start:end]`` of ``file`` (character offsets) by ``after``."""

    file: str
    function: str
    kind: str
    line: int
    start: int
    end: int
    before: str
    after: str

    def apply(self, source: str) -> str:
        if source[self.start : self.end] != self.before:
            raise ValueError(f"{self.file}:{self.line}: source changed since the site was found")
        return source[: self.start] + self.after + source[self.end :]

    def revert(self, mutated: str) -> str:
        """The reverse patch (the oracle fix)."""
        end = self.start + len(self.after)
        if mutated[self.start : end] != self.after:
            raise ValueError(f"{self.file}:{self.line}: not the mutated source")
        return mutated[: self.start] + self.before + mutated[end:]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _offsets(source: str) -> list[int]:
    starts, pos = [0], 0
    for line in source.splitlines(keepends=True):
        pos += len(line.encode("utf-8"))
        starts.append(pos)
    return starts


class _Sites(ast.NodeVisitor):
    def __init__(self, file: str, source: str) -> None:
        self.file, self.source = file, source
        self._bytes = source.encode("utf-8")
        self._lines = _offsets(source)
        self.func = ""
        self.found: list[Mutation] = []

    def _span(self, node: ast.AST) -> tuple[int, int]:
        # ast offsets are UTF-8 byte columns; convert to character offsets.
        b0 = self._lines[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        b1 = self._lines[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return len(self._bytes[:b0].decode()), len(self._bytes[:b1].decode())

    def _add(self, node: ast.AST, kind: str, after: str) -> None:
        start, end = self._span(node)
        before = self.source[start:end]
        if before != after:
            line = node.lineno  # type: ignore[attr-defined]
            self.found.append(Mutation(self.file, self.func, kind, line, start, end, before, after))

    def _swap(self, node: ast.expr, new: ast.expr, kind: str) -> None:
        self._add(node, kind, "(" + ast.unparse(new) + ")")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.func = self.func, (f"{self.func}.{node.name}" if self.func else node.name)
        for stmt in node.body:  # decorators and defaults are not function bodies
            self.visit(stmt)
        self.func = outer

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer, self.func = self.func, (f"{self.func}.{node.name}" if self.func else node.name)
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.visit(stmt)
        self.func = outer

    def generic_visit(self, node: ast.AST) -> None:
        if self.func:
            self._collect(node)
        super().generic_visit(node)

    def _collect(self, node: ast.AST) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            op = _BINOP_SWAP[type(node.op)]
            new = parse(f"a {op} b", mode="eval").body
            assert isinstance(new, ast.BinOp)
            self._swap(node, ast.BinOp(node.left, new.op, node.right), "binop")
        elif (
            isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP
        ):
            new = parse(f"a {_CMP_SWAP[type(node.ops[0])]} b", mode="eval").body
            assert isinstance(new, ast.Compare)
            self._swap(node, ast.Compare(node.left, new.ops, node.comparators), "compare")
        elif isinstance(node, ast.BoolOp):
            flip: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self._swap(node, ast.BoolOp(flip, node.values), "boolop")
        elif isinstance(node, ast.Constant) and type(node.value) is int and not node.value < 0:
            self._add(node, "off_by_one", str(node.value + 1))
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                self._add(node, "return", "return None")
        elif isinstance(node, ast.If) and not node.orelse:
            self._add(node, "branch", "pass")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self._add(node, "negate", "(" + ast.unparse(node.operand) + ")")


def sites(file: str, source: str) -> list[Mutation]:
    """Every mutation site in the function bodies of one module, in source order."""
    finder = _Sites(file, source)
    finder.visit(parse(source))
    ok = []
    for m in finder.found:
        try:
            parse(m.apply(source))
        except SyntaxError:
            continue
        ok.append(m)
    return ok
