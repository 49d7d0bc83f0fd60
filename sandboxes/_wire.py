"""The judge's wire (``_judge.py``): frames, plain values as tagged data, and references.

Why a format of our own: the judge must rebuild whatever the candidate's process sends
without running any of the candidate's code, so nothing is unpickled or evaluated: every
value is a tag the judge turns into an object it builds itself. Plain values are None, bool,
int, float, complex, str, bytes, bytearray, Fraction, Decimal, range, and lists, tuples,
sets, frozensets, dicts and deques of them. The player (the candidate's side) also sends a
subclass of these as its base value (an ``IntEnum`` as its int, a namedtuple as its tuple, an
``OrderedDict`` as a dict), numpy values through ``tolist()`` and a dict's keys or items as
a set: what it sends is the candidate's answer either way, and the judge only ever holds its
own objects. Anything else goes by reference (:class:`_Ref`).

Frames are ``len\n`` + body. The judge writes marshal (its own data; the player trusts it);
the player writes JSON that :func:`_dumps` builds from lists, small ints, None, bools and
strings of ``[0-9A-Za-z+-._]`` only (text travels as hex), and the judge reads it with
``json.loads``: it never unmarshals the candidate's bytes. Ints travel as hex (no
``int_max_str_digits`` limit), floats as their repr. Module imports stay lazy (``json``,
``fractions``, ``decimal``): the runner's source is compiled by every sandbox start.
Stdlib only; concatenated into the in-sandbox runner like ``_harness.py``.
"""

import marshal
import os

TYPE_CHECKING = False  # typing costs ~6 ms at a cold start; mypy reads this block
if TYPE_CHECKING:
    from typing import Any

try:  # inside the sandbox the harness source is prepended instead (``local.RUNNER``)
    from ._harness import _read_exact
except ImportError:
    pass

MAX_FRAME = 1 << 28
_PAST: "dict[int, bytes]" = {}  # per fd: bytes read past the last frame (``_recv``)
_SCAN: list = []  # json's C scanner (``_json``), built once
MAX_DEPTH = 200
# The dunder attributes a test may read from the candidate's objects (plain strings).
_NAME_ATTRS = ("__name__", "__qualname__", "__doc__", "__module__")
# Methods of immutable plain values (``str.startswith``, ``frozenset.issubset``, ...) only
# answer questions about a value. A test that calls one expects plain data, which arrives as
# plain data and runs the judge's own method; on a candidate's object it would be the object
# answering for the value (an object whose every predicate says True), so it is refused.
_VALUE_METHODS = frozenset(
    name
    for cls in (str, bytes, int, float, complex, tuple, frozenset)
    for name in dir(cls)
    if not name.startswith("_")
)
_SEQUENCES: "tuple[tuple[type, str], ...]" = (
    (list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F"),
)  # fmt: skip
_SAFE = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+-._")


def _hx(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").hex()


def _unhx(data: object) -> str:
    return bytes.fromhex(str(data)).decode("utf-8", "surrogatepass")


def _dumps(x: object) -> str:
    """JSON for the player's frames: nothing in them needs escaping (see the docstring)."""
    if type(x) is list:
        return "[" + ",".join(_dumps(y) for y in x) + "]"
    if x is None or x is True or x is False:
        return {None: "null", True: "true", False: "false"}[x]
    if type(x) is int:
        return str(x)
    if type(x) is str and _SAFE.issuperset(x):
        return '"' + x + '"'
    raise ValueError(f"not a wire value: {type(x).__name__}")


def _send(fd: int, msg: "Any", player: bool = False) -> None:
    """A frame: the player's as JSON text, the judge's as marshal."""
    body = _dumps(msg).encode() if player else marshal.dumps(msg)
    data = str(len(body)).encode() + b"\n" + body
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])


def _recv(fd: int, judge: bool = False) -> "Any":
    """One frame, or raise EOFError (the peer is gone) / ValueError (a malformed frame).
    ``judge``: this end is the judge, so the frame is the candidate's JSON.

    Read in chunks, not the length line byte by byte: a frame usually arrives whole (one
    ``write`` of head + body), so one ``read`` takes it (a run's ~20 frames took ~100 reads).
    Bytes past the frame wait in ``_PAST`` for the next one, as they would in the pipe."""
    buf = _PAST.pop(fd, b"")
    while b"\n" not in buf[:13]:
        if len(buf) > 12:
            raise ValueError("malformed frame from the candidate's process")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise EOFError("the candidate's process ended")
        buf += chunk
    head, _, rest = buf.partition(b"\n")
    n = int(head)
    if not 0 <= n <= MAX_FRAME:
        raise ValueError(f"a frame of {n} bytes from the candidate's process")
    if len(rest) > n:
        _PAST[fd] = rest[n:]
    if len(rest) >= n:
        body: bytes | bytearray | None = rest[:n]
    else:
        more = _read_exact(fd, n - len(rest))
        body = None if more is None else rest + more
    if body is None:
        raise EOFError("the candidate's process ended")
    if not judge:
        return marshal.loads(bytes(body))
    return _json(bytes(body).decode())


def _json(text: str) -> "Any":
    """``json.loads`` for the player's frames, on its C scanner directly: the frames are
    compact ASCII (``_dumps``), and each run's judge otherwise walked ``json.loads``, ``decode``
    and ``raw_decode`` (Python) for every frame. Anything but one whole value is a ValueError."""
    if not _SCAN:
        import json.scanner  # preloaded by the zygote, which also builds the scanner

        # typeshed types the context as the scanner class; it is the decoder (json's own use)
        _SCAN.append(json.scanner.make_scanner(json.JSONDecoder()))  # type: ignore[arg-type]
    try:
        value, end = _SCAN[0](text, 0)
    except StopIteration as e:
        raise ValueError(f"not JSON at {e.value}") from None
    if end != len(text):
        raise ValueError("bytes after the frame's JSON value")
    return value


def _enc(v: "Any", refs: "dict | None", depth: int = 0) -> list:
    """``v`` as tagged JSON. ``refs``: the player's table of objects sent by reference; None
    on the judge's side, whose arguments must be plain (or the candidate's own ``_Ref``)."""
    if v is None:
        return ["n"]
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    exact = refs is None  # the judge sends its own values; the player's may be subclasses
    t = type(v)
    if t is _Ref:
        return ["r", v._id]
    if isinstance(v, bool):
        return ["B", bool(v)]
    if isinstance(v, int) and (t is int or not exact):
        return ["i", hex(int.__index__(v))]
    if isinstance(v, float) and (t is float or not exact):
        return ["f", repr(float.__float__(v))]
    if isinstance(v, complex) and (t is complex or not exact):
        return ["c", repr(v.real), repr(v.imag)]
    if isinstance(v, str) and (t is str or not exact):
        return ["s", _hx(str.__str__(v))]
    if isinstance(v, bytes | bytearray) and (t in (bytes, bytearray) or not exact):
        return ["y" if isinstance(v, bytes) else "Y", bytes(v).hex()]
    module, name = t.__module__, t.__name__
    if (module, name) == ("fractions", "Fraction"):
        return ["Q", hex(int(v.numerator)), hex(int(v.denominator))]
    if (module, name) == ("decimal", "Decimal"):
        return ["D", _hx(str(v))]
    if t is range:
        return ["R", hex(v.start), hex(v.stop), hex(v.step)]
    if isinstance(v, dict) and (t is dict or not exact):
        items = [[_enc(k, refs, depth + 1), _enc(x, refs, depth + 1)] for k, x in v.items()]
        return ["d", items]
    for cls, tag in _SEQUENCES:
        if isinstance(v, cls) and (t is cls or not exact):
            seq: Any = v
            return [tag, [_enc(x, refs, depth + 1) for x in seq]]
    if (module, name) == ("collections", "deque"):
        return ["q", [_enc(x, refs, depth + 1) for x in v]]
    if refs is None:
        raise TypeError(f"a test passed a {t.__name__} to the candidate (plain data only)")
    if t.__name__ in ("dict_keys", "dict_items"):
        return ["S", [_enc(x, refs, depth + 1) for x in v]]
    if t.__module__ == "numpy" and hasattr(v, "tolist"):
        return _enc(v.tolist(), refs, depth + 1)
    refs[len(refs)] = v
    return ["r", len(refs) - 1, _hx(name)]


def _dec(x: list, conn: "Any", objs: "dict | None" = None) -> "Any":
    """Objects the caller builds itself from tagged JSON. ``objs``: the player's table (a
    ``["r", id]`` is one of its own objects); else refs become :class:`_Ref` over ``conn``."""
    tag = x[0]
    if tag == "n":
        return None
    if tag == "B":
        return bool(x[1])
    if tag == "i":
        return int(x[1], 16)
    if tag == "f":
        return float(x[1])
    if tag == "c":
        return complex(float(x[1]), float(x[2]))
    if tag == "s":
        return _unhx(x[1])
    if tag in ("y", "Y"):
        return (bytes if tag == "y" else bytearray).fromhex(x[1])
    if tag == "Q":
        from fractions import Fraction

        return Fraction(int(x[1], 16), int(x[2], 16))
    if tag == "D":
        from decimal import Decimal

        return Decimal(_unhx(x[1]))
    if tag == "R":
        return range(int(x[1], 16), int(x[2], 16), int(x[3], 16))
    if tag in ("l", "t", "S", "F", "q"):
        items = [_dec(y, conn, objs) for y in x[1]]
        if tag == "q":
            from collections import deque

            return deque(items)
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag == "d":
        return {_dec(k, conn, objs): _dec(v, conn, objs) for k, v in x[1]}
    if tag == "r":
        if objs is not None:
            return objs[int(x[1])]
        return _Ref(conn, int(x[1]), _unhx(x[2]) if len(x) > 2 else "object")
    raise ValueError(f"unknown tag {tag!r} from the candidate's process")


class _Ref:
    """A non-plain object living in the player. Calls, attributes, ``len``, ``str``,
    indexing and iteration go to the player and come back as plain data, like any call's
    result; ``in`` is decided by the judge over the items iteration returned. Comparisons,
    hashing, truth tests and the methods of plain value types (``_VALUE_METHODS``) raise, so
    it never satisfies an assertion by itself: every predicate runs on the judge's data."""

    __slots__ = ("_conn", "_id", "_kind")
    _conn: "Any"

    def __init__(self, conn: "Any", ref: int, kind: str) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_id", ref)
        object.__setattr__(self, "_kind", kind)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._conn.ask(["call", self._id, _enc(list(args), None), _enc(kwargs, None)])

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name not in _NAME_ATTRS:
            raise AttributeError(name)
        if name in _VALUE_METHODS:
            raise TypeError(f"the candidate returned {self!r}, not plain data ({name})")
        return self._conn.ask(["attr", self._id, name])

    def __iter__(self):
        return iter(self._conn.ask(["iter", self._id]))

    def __len__(self) -> int:
        return self._conn.ask(["len", self._id])

    def __str__(self) -> str:
        return self._conn.ask(["str", self._id])

    def __getitem__(self, key: object) -> object:
        return self._conn.ask(["getitem", self._id, _enc(key, None)])

    def __contains__(self, item: object) -> bool:
        """Decided here, over the plain items the object yields: its ``__contains__`` could
        answer True to anything."""
        return item in self._conn.ask(["iter", self._id])

    def __repr__(self) -> str:
        return f"<the candidate's {self._kind}>"

    def _refuse(self, *_: object) -> bool:
        raise TypeError(f"the candidate returned {self!r}, not plain data; it cannot be compared")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __hash__ = _refuse
