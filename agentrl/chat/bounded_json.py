"""JSON decoding with the nesting bounded before the decoder runs.

Why: the text decoded here is written by the policy (tool calls) or by any local client
(`agentrl serve`). `json` decodes recursively, so ~1,000 nested brackets raise
`RecursionError` (not a `JSONDecodeError`) and the structures it builds break whatever walks
them next (`json.dumps`, `deepcopy`). Every decode of such text goes through `loads` /
`raw_decode` here: a value nested deeper than `MAX_DEPTH` is refused with a
`TooDeep` (a `json.JSONDecodeError`) before decoding starts, and a decoder failure of any other kind
becomes one too, so callers handle exactly one exception type.

The depth scan is linear: strings are skipped whole (an unterminated one ends the scan), and
it stops at the first bracket past the bound or where the value starting at `pos` closes.
`loads` skips it when the text has too few brackets to nest past the bound.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 100  # real tool arguments nest a handful of levels; vLLM's parsers allow less
_NEXT = re.compile(r'[\[\]{}"]')


def _finite(literal: str) -> float:
    """JSON has no infinities: `1e999` (which `float` rounds to inf) and Python's `Infinity` /
    `NaN` extensions are refused, so a decoded value always encodes back to valid JSON (an
    inf would go out as `Infinity`, which clients reject)."""
    value = float(literal)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"number {literal[:40]!r} is not a finite JSON number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


class TooDeep(json.JSONDecodeError):
    """A value nested deeper than the bound; `pos` is the first bracket past it (a scanner
    looking for more values resumes after it, so no stretch is scanned twice). Its `doc` is
    empty: `JSONDecodeError` counts the lines before `pos`, a cost per error that a scan
    over many candidate starts would pay again and again."""


def _string_end(text: str, quote: int) -> int:
    """Index just past the string opening at `quote`; -1 if it never closes."""
    k = quote
    while True:
        k = text.find('"', k + 1)
        if k < 0:
            return -1
        b = k - 1
        while text[b] == "\\":  # an even run of backslashes leaves the quote unescaped
            b -= 1
        if (k - 1 - b) % 2 == 0:
            return k + 1


def _scan(text: str, pos: int, limit: int) -> tuple[int | None, int | None]:
    """(where the value at `pos` first nests deeper than `limit`, the index just past its
    closing bracket); None where it does not / never closes. Only a value that opens with a
    bracket at `pos` can nest (a scalar holds no structural bracket).

    Strings are skipped with `str.find` (a regex over one long string held the GIL for
    seconds: 7.5 s for an 8 MB string); each step is a short C call, so a scan in a worker
    thread never stalls the event loop."""
    if text[pos : pos + 1] not in ("[", "{"):
        return None, None
    depth, i, search = 0, pos, _NEXT.search
    while (m := search(text, i)) is not None:
        j = m.start()
        c = text[j]
        if c == '"':
            i = _string_end(text, j)
            if i < 0:
                return None, None
            continue
        if c in "[{":
            depth += 1
            if depth > limit:
                return j, None
        else:
            depth -= 1
            if depth <= 0:
                return None, j + 1
        i = j + 1
    return None, None


def too_deep_at(text: str, pos: int = 0, limit: int = MAX_DEPTH) -> int | None:
    """Where the JSON value starting at `pos` first nests deeper than `limit` (that bracket's
    index), None if it does not."""
    return _scan(text, pos, limit)[0]


def raw_decode(text: str, pos: int = 0, limit: int = MAX_DEPTH) -> tuple[Any, int]:
    """`json.JSONDecoder().raw_decode(text, pos)` with the nesting bounded; any failure is a
    `json.JSONDecodeError` (positions in its message count from `pos`)."""
    deep, end = _scan(text, pos, limit)
    if deep is not None:
        raise TooDeep(f"nested deeper than {limit} levels", "", deep)
    # Decode only the bracketed span: a decoder error's cost is then the span's, not the text's.
    doc, base = (text[pos:end], pos) if end is not None else (text, 0)
    try:
        value, stop = _DECODER.raw_decode(doc, pos - base)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError, MemoryError) as e:  # e.g. a huge integer literal
        raise json.JSONDecodeError(f"{type(e).__name__}: {e}", doc, 0) from e
    return value, stop + base


def loads(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """`json.loads(text)` with the nesting bounded; any failure is a `json.JSONDecodeError`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise json.JSONDecodeError(f"not UTF-8: {e}", "", 0) from e
    if not isinstance(text, str):  # as json.loads: the caller passed the wrong kind of thing
        raise TypeError(f"JSON text must be str or bytes, not {type(text).__name__}")
    few = text.count("[") + text.count("{") <= limit  # cannot nest deeper: no scan needed
    at = None if few else too_deep_at(text, len(text) - len(text.lstrip()), limit)
    if at is not None:
        raise TooDeep(f"nested deeper than {limit} levels", "", at)
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError, MemoryError) as e:
        raise json.JSONDecodeError(f"{type(e).__name__}: {e}", text, 0) from e
