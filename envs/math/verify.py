"""Math answer verification with `math-verify`: LaTeX, `\\boxed{}`, fractions, intervals, sets.

`is_equivalent(prediction, gold)` parses both sides into sympy objects and compares them, so
`\\frac{1}{2}` matches `0.5`, `\\boxed{x=2}` matches `2` and `\\{3,1,2\\}` matches
`\\{1,2,3\\}`; string comparison would call all of those wrong and teach the policy formatting
instead of math.

Why the wrapping below:
* A gold answer is a bare expression (`[1,2)`), which math-verify only reads as LaTeX inside
  `$...$`; we add the delimiters when the gold has none.
* A prediction is a whole model message; math-verify extracts its `\\boxed{}` (or last
  expression) itself. A short bare answer it cannot read is retried inside `$...$`.
* math-verify's parsing builds Python ASTs (sympy), which threads must not do at once
  (`agentrl.tools.ast_lock`): each parse takes that lock. `verify` compares parsed objects and
  runs unlocked, so a slow comparison never holds up another episode's tool call.
* math-verify's timeouts use `signal.alarm`, which only works on the main thread. Envs are
  often stepped in worker threads, so off the main thread we turn its timeouts off and bound
  the work by input length instead (`MAX_CHARS`).
"""

from __future__ import annotations

import threading
from typing import Any

from math_verify import parse, verify

from agentrl.tools.ast_lock import AST_LOCK

MAX_CHARS = 4000
"""Only the last `MAX_CHARS` of a prediction are parsed; the answer is at the end."""
_SHORT = 64
_TIMEOUT_S = 5


def _timeout() -> int | None:
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _delimited(text: str) -> bool:
    return "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text


def parse_gold(gold: str | int | float) -> list[Any]:
    """Parse a dataset's ground truth (bare LaTeX or a number)."""
    text = str(gold).strip()
    if not _delimited(text):
        text = f"${text}$"
    return _parse(text)


def parse_prediction(text: str) -> list[Any]:
    """Parse a model's answer: its last `\\boxed{}`/expression, or a short bare answer."""
    text = text[-MAX_CHARS:]
    parsed = _parse(text)
    if not parsed and 0 < len(text.strip()) <= _SHORT and not _delimited(text):
        parsed = _parse(f"${text.strip()}$")
    return parsed


def _parse(text: str) -> list[Any]:
    with AST_LOCK:
        return parse(text, parsing_timeout=_timeout())


def is_equivalent(prediction: str, gold: str | int | float) -> bool:
    """True if the prediction's final answer equals the gold answer mathematically."""
    gold_parsed = parse_gold(gold)
    pred_parsed = parse_prediction(prediction)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=_timeout()))
