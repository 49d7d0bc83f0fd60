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
