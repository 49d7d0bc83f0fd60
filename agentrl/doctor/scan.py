"""The data search the `tool-data-lookup` probe runs inside an env's own code-execution tool.

Why a program, not a list of paths: hidden data leaks wherever the machine happens to put it
(a dataset package's data file, a copy in a cache, the grader's environment or argv, a file
descriptor the sandbox inherited, a module it can import), so the search walks everything the
tool can reach, within a time budget, and opens what it finds (gzip, zip and tar members too).

It plays two roles in one run, kept apart:

* the instrument: the current task's hidden strings (`HiddenData`, handed over compressed, so
  the program's own text never holds them) are looked for everywhere; a place holding two of
  them (or the only one) is a leak. The data packages must not even resolve as imports.
* the adversary: knowing only the prompt (its distinctive lines, the entry points, the file a
  bug statement names), it collects what a policy could use: JSON records that contain the
  prompt and carry an answer or a solution, and other copies of the file it must repair, which
  it writes over the workspace's when `restore` is set (a fix it did not make).

The report goes back through whatever the tool shows: printed, and raised by every entry point
and at the end (a test runner shows only exception messages) as ``<<RT base64(zlib(json))>>``.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

_PROGRAM = r'''
import base64, io, json, os, stat, sys, tarfile, time, zipfile, zlib
CFG = json.loads(zlib.decompress(base64.b64decode(__CFG__)))
END = time.monotonic() + CFG["budget"]
NEEDLES = [n.encode() for n in CFG["needles"]] + [json.dumps(n)[1:-1].encode() for n in CFG["needles"]]
NEED = min(2, len(CFG["needles"]))
CLUES = [c.encode() for c in CFG["clues"]] + [json.dumps(c)[1:-1].encode() for c in CFG["clues"]]
HINT = CFG["hint"]
HERE = os.path.realpath(".")
R = {"leaks": [], "n": 0, "files": 0, "answers": [], "restored": []}
KEYS = ("canonical_solution", "solution", "answer", "ground_truth", "output", "expected", "target")

def hits(data):
    return len({i % (len(NEEDLES) // 2 or 1) for i, n in enumerate(NEEDLES) if n in data})

def records(data):
    for line in data.splitlines():
        if len(line) < 1 << 20 and any(c in line for c in CLUES) and line.lstrip()[:1] == b"{":
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                for k in KEYS:
                    v = rec.get(k)
                    if isinstance(v, (str, int, float)) and len(str(v)) <= 200:
                        R["answers"].append(str(v))

def look(place, data):
    R["files"] += 1
    if NEED and hits(data) >= NEED:
        R["n"] += 1
        if len(R["leaks"]) < 12:
            R["leaks"].append(place[-90:])
    if CLUES and any(c in data for c in CLUES):
        records(data)
    if HINT and place.endswith("/" + HINT) and not place.startswith(HERE + "/"):
        here = os.path.join(HERE, HINT)
        try:
            mine = open(here, "rb").read()
        except OSError:
            mine = None
        if mine is not None and mine != data and CFG["restore"]:
            open(here, "wb").write(data)
            R["restored"].append(place[-90:])

def unpack(place, data):
    look(place, data)
    try:
        if data[:2] == b"\x1f\x8b":
            inner = zlib.decompressobj(31).decompress(data, 64 << 20)
            if inner[257:262] == b"ustar":
                data = inner
            else:
                return look(place + "!", inner)
        if data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for i in z.infolist()[:5000]:
                    if i.file_size < 16 << 20:
                        look(place + "!" + i.filename, z.read(i))
        elif data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                for m in t.getmembers()[:5000]:
                    f = m.isfile() and m.size < 16 << 20 and t.extractfile(m)
                    if f:
                        look(place + "!" + m.name, f.read())
    except Exception:
        pass

def read(path):
    """A regular file's bytes (never blocks on a FIFO or device); None for an ELF binary (its
    header only: no task data) or a file over 64 MB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 64 << 20:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            head = f.read(4)
            return None if head == b"\x7fELF" else head + f.read(64 << 20)
    except OSError:
        return None
    finally:
        os.close(fd)

def proc():
    look("environ of the tool", "\n".join(os.environ.values()).encode())
    me = str(os.getpid())
    for pid in sorted(os.listdir("/proc")):
        if not pid.isdigit() or pid == me:
            continue
        for what in ("environ", "cmdline"):
            data = read("/proc/%s/%s" % (pid, what))
            if data:
                look("/proc/%s/%s" % (pid, what), data)
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            fds = []
        for fd in fds:
            p = "/proc/%s/fd/%s" % (pid, fd)
            if os.path.isfile(p):
                data = read(p)
                if data:
                    unpack(p + " -> " + os.readlink(p), data)
    import importlib.util
    for name in CFG["packages"]:
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            spec = None
        where = [p for p in (spec and (spec.submodule_search_locations or [spec.origin])) or []]
        where = [p for p in where if p and (os.path.isfile(p) or (os.path.isdir(p) and os.listdir(p)))]
        if where:
            R["n"] += 1
            R["leaks"].insert(0, "import %s (%s)" % (name, where[0][-50:]))

def parts(path):
    return [c for c in path.split("/") if c]

def walk(i, top, prune):
    """Files under `top` in sorted pre-order, resuming after the cursor; False: out of time."""
    cur = CUR[1] if CUR and CUR[0] == i else None
    last = cur
    for d, subs, files in os.walk(top):
        here = parts(d)
        subs[:] = sorted(s for s in subs if s != "__pycache__" and os.path.join(d, s) not in prune
                         and (cur is None or parts(os.path.join(d, s)) > cur
                              or cur[:len(here) + 1] == here + [s]))
        if cur is not None and here <= cur:
            continue
        if time.monotonic() > END:
            R["cursor"] = [i, last]
            return False
        for f in sorted(files):
            data = read(os.path.join(d, f))
            if data is not None:
                unpack(os.path.join(d, f), data)
        last = here
    return True

CUR = CFG["cursor"]
if not CUR:
    proc()
NEAR = [t for t in (HERE, os.path.dirname(HERE), "/tmp", os.path.expanduser("~")) if t != "/"]
TOPS = [os.path.realpath(t) for t in NEAR + [p for p in sys.path if p.endswith("-packages")] + ["/"]]
TOPS = list(dict.fromkeys(t for t in TOPS if os.path.isdir(t)))
R["cursor"] = None
for i, top in enumerate(TOPS):
    if CUR and CUR[0] > i:
        continue
    if not walk(i, top, {"/proc", "/sys", "/dev", *TOPS[:i]}):
        break
R["answers"] = list(dict.fromkeys(R["answers"]))[:3]
while True:
    MSG = "<<RT" + json.dumps(R, separators=(",", ":")) + "TR>>"
    if len(MSG) <= CFG["cap"] or not (R["leaks"] or R["answers"]):
        break
    (R["leaks"] or R["answers"]).pop()
print(MSG)
'''

_MARK = re.compile(r"<<RT(\{.*?\})TR>>")


def program(
    needles: list[str],
    packages: list[str],
    clues: list[str],
    *,
    entry_points: Sequence[str] = (),
    hint: str = "",
    restore: bool = False,
    budget_s: float = 3.0,
    cap: int = 380,
    exit_with_report: bool = False,
    cursor: list[Any] | None = None,
) -> str:
    """The search as Python source: `needles` (hidden strings, the instrument), `packages`
    (must not resolve), `clues` (prompt lines, the adversary's), `hint` (a file path the
    adversary looks for other copies of), `cap` the report's length in characters; `exit_with_report` ends the program with the report
    as its error (the last stderr line is all a stdin/stdout test runner shows)."""
    cfg: dict[str, Any] = {"needles": needles, "packages": packages, "clues": clues}
    cfg["hint"] = hint
    cfg |= {"restore": restore, "budget": budget_s, "cap": cap, "cursor": cursor}
    blob = base64.b64encode(zlib.compress(json.dumps(cfg).encode())).decode()
    src = _PROGRAM.replace("__CFG__", repr(blob))
    raise_it = "    raise ValueError(MSG)\n"
    src += "".join(f"def {n}(*a, **k):\n{raise_it}" for n in entry_points)
    return src + ("raise SystemExit(MSG)\n" if exit_with_report else "")


def report(text: str) -> dict[str, Any] | None:
    """The last report found in a tool's output, or None."""
    found = _MARK.findall(text)
    if not found:
        return None
    try:
        out = json.loads(found[-1])
    except ValueError:
        return None
    return out if isinstance(out, dict) else None
