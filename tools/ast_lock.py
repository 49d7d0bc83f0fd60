"""`ast.parse` that many threads may call at once: every in-process parse takes one lock.

Why: CPython keeps the AST constructor's recursion depth in interpreter-wide state, not per
thread (python/cpython#106905, still on 3.11). When a garbage collection inside one
thread's parse runs Python code and the interpreter switches threads, a second parse moves
the shared depth, and one of them fails with `SystemError: AST constructor recursion depth
mismatch`. The rollout steps episodes in worker threads, so a calculator env's reset (it
evaluates its expression) or a calculator tool call failed at random: the episode was
recorded as an error, or the tool call came back failed and the policy lost a reward it had
earned. Seen in `tests/rollout/test_rollout_exact.py` under load; reproduced by
`tests/core/test_ast_lock.py`. Parsing holds the GIL anyway, so the lock costs no
parallelism. Third-party code that builds ASTs (sympy's `parse_expr`) takes the same lock
from where we call it: reasoning-gym's generators and verifiers (`envs/reasoning/rg.py`,
where a raised verifier scores 0: a right answer lost its reward). Code run in a sandbox and
math-verify (`envs/math/verify.py`, in worker processes) parse in their own processes.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

AST_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse(source, filename, mode)` under `AST_LOCK`."""
    with AST_LOCK:
        return ast.parse(source, filename, mode)
