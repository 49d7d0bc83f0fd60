"""Check the wheels that `vllm_gpu_bundle.sh` downloaded against the requirements they declare.

Usage: `python3 benchmarks/vllm_gpu_pins.py REQUIREMENTS DOWNLOAD_DIR` (the bundle script runs
it). Why: the pins were chosen by hand as of vLLM 0.26.0's release; a pin outside vllm's own
`Requires-Dist` range, or one pinned wheel needing another version of a second (pydantic pins
pydantic-core exactly), would only show on the GPU machine, a device call later. Each
requirement is read from the wheel's METADATA, markers evaluated for CPython 3.12 on Linux
x86_64. A conflict among the pins exits 1 naming both sides; requirements of the small wheels
that are not pinned are printed (stderr) as what the GPU machine must already have. Prints
(stdout) the matched wheel file names, one a line.
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}


def read_pins(requirements: Path) -> dict[str, Version]:
    """`name==version` of each line of the requirements file (hash options ignored)."""
    pins = {}
    for line in requirements.read_text().splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)==(\S+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def find_wheels(pins: dict[str, Version], folder: Path) -> dict[str, Path]:
    """The one downloaded wheel of each pin; exits naming a pin with none (or two)."""
    found: dict[str, list[Path]] = {}
    for path in folder.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
        if pins.get(name) == version:
            found.setdefault(name, []).append(path)
    bad = [
        f"{n}=={v}: {len(found.get(n, []))} wheels"
        for n, v in pins.items()
        if len(found.get(n, [])) != 1
    ]
    if bad:
        sys.exit(f"in {folder}: " + "; ".join(bad))
    return {name: paths[0] for name, paths in found.items()}


def requirements(wheel: Path) -> list[Requirement]:
    """The wheel's `Requires-Dist` that apply to CPython 3.12 on Linux x86_64, no extras."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        message = Parser().parsestr(z.read(meta).decode())
    reqs = [Requirement(line) for line in message.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


def main(argv: list[str]) -> int:
    """Check every pinned wheel's requirements against the other pins; print the wheels."""
    if len(argv) != 2:
        sys.exit("usage: vllm_gpu_pins.py REQUIREMENTS DOWNLOAD_DIR")
    pins = read_pins(Path(argv[0]))
    wheels = find_wheels(pins, Path(argv[1]))
    conflicts, host = [], set()
    for name, wheel in sorted(wheels.items()):
        for req in requirements(wheel):
            dep = canonicalize_name(req.name)
            if dep in pins:
                if not req.specifier.contains(pins[dep], prereleases=True):
                    conflicts.append(f"{name}=={pins[name]} needs {req}, pinned {dep}=={pins[dep]}")
            elif name != "vllm":  # vllm's unmet ones are the features the notes leave out
                host.add(dep)
    if conflicts:
        sys.exit("pins conflict:\n  " + "\n  ".join(conflicts))
    print(f"{len(pins)} pins agree with vllm's METADATA and each other's", file=sys.stderr)
    print(
        "the small wheels also need (on the GPU machine): " + ", ".join(sorted(host)),
        file=sys.stderr,
    )
    for wheel in sorted(wheels.values()):
        print(wheel.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
