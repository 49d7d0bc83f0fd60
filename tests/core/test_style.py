"""Project contracts enforced in CI: ruff lint + format, and the file-size cap."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 800  # hard cap per Python file; aim for < 400


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the [test] extra")
@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_clean(args):
    out = subprocess.run(["ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_python_files_stay_under_the_size_cap():
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout.split()
    files = tracked or [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")]
    big = {f: n for f in files if (n := len((ROOT / f).read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these by responsibility: {big}"


def test_no_tool_cache_or_bulky_file_is_tracked():
    """Caches committed by accident (a 142 MB .mypy_cache once) make every clone heavier and the
    tree too large to carry to the GPU machine (64 MiB a call, the working tree included)."""
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60
    ).stdout.decode()
    tracked = [f for f in out.split("\0") if f]
    if not tracked:
        pytest.skip("not a git checkout")
    caches = (".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".hypothesis/", "__pycache__/")
    cached = [f for f in tracked if any(f"/{c}" in f"/{f}" for c in caches)]
    assert not cached, f"tool caches are tracked: {cached[:5]}"
    sizes = {f: (ROOT / f).stat().st_size for f in tracked if (ROOT / f).is_file()}
    big = {f: n for f, n in sizes.items() if n > 2_000_000}
    assert not big, f"files over 2 MB are tracked: {big}"
    assert sum(sizes.values()) < 24 * 2**20, f"tracked tree is {sum(sizes.values())} bytes"
