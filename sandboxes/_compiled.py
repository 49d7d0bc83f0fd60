"""Host side of a judged run: the tests and ``support`` compiled where they are trusted.

Why: parsing the tests, finding the names they read but never bind, and compiling them and
the support code cost the judge ~1.6 ms of a HumanEval run (~10% of its CPU), in a fresh
fork whose every touched page is a copy-on-write fault. The host does it in a warm process,
once per test source (an RL group judges the same tests for every sample), and sends the
code objects marshalled in the frame that only the judge reads (``_judge._run_tests``).

Only for the host's own interpreter: marshalled code is specific to a Python version, so a
sandbox that runs another interpreter (``LocalBackend(python=...)``) compiles in the judge
as before, and so does a test source this interpreter cannot compile (the judge then
reports the error as a failed test, as it always did).
"""

from __future__ import annotations

import marshal
from functools import lru_cache

from ._judge import build_tests


@lru_cache(maxsize=1024)
def built(check: str, support: str) -> bytes | None:
    """``marshal`` of the judge's ``(tests code, support code or None, free names)``."""
    try:
        return marshal.dumps(build_tests(check, support))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
