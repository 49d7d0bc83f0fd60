"""mypy runs over the whole package, as installed: `agentrl.envs` is `envs/` (see
[tool.setuptools] in pyproject.toml), which mypy cannot read from an editable install's
import hook, so the test lays the installed tree out as symlinks and checks `-p agentrl`.
Config: [tool.mypy] in pyproject.toml. `python tests/core/test_typecheck.py` prints the report.

The package has no mypy errors, and the test keeps it so: any error fails it, printed in full.
Where the checker is wrong, a `# type: ignore[code]` carries the reason beside it.

With a cold cache (CI's clean clone) mypy takes ~2 minutes of one core, so when the suite
selects this test, tests/conftest.py starts mypy in the background as collection ends and
moves the test to the end of the run, where it only collects the report: the two-core CI box
overlaps mypy with the rest of the suite instead of adding it to the wall time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAPPED = {"envs": "envs", "tools": "tools", "sandboxes": "sandboxes", "configs": "configs"}


def _tree() -> Path:
    """A stable folder (so mypy's cache is reused) holding `agentrl/` as it installs."""
    key = hashlib.sha1(str(REPO).encode()).hexdigest()[:10]
    base = Path(tempfile.gettempdir()) / f"agentrl-mypy-{key}"
    pkg = base / "tree" / "agentrl"
    pkg.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p for p in (REPO / "agentrl").iterdir() if p.name != "__pycache__"}
    wanted.update({name: REPO / folder for name, folder in MAPPED.items()})
    for link in pkg.iterdir():
        if link.name not in wanted or link.resolve() != wanted[link.name]:
            link.unlink()
    for name, target in wanted.items():
        if not (pkg / name).is_symlink():
            (pkg / name).symlink_to(target)
    return base


def _repo_path(path: str) -> str:
    """`agentrl/envs/core.py` (as mypy names it) -> `envs/core.py` (where it lives)."""
    parts = Path(path).parts
    if len(parts) > 1 and parts[0] == "agentrl" and parts[1] in MAPPED:
        return str(Path(MAPPED[parts[1]], *parts[2:]))
    return path


_background: subprocess.Popen[str] | None = None


def _start() -> subprocess.Popen[str]:
    base = _tree()
    return subprocess.Popen(
        [sys.executable, "-m", "mypy", "-p", "agentrl", "--config-file",
         str(REPO / "pyproject.toml"), "--cache-dir", str(base / "cache"),
         "--no-error-summary", "--hide-error-context"],
        cwd=base / "tree", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def start_in_background() -> None:
    """Start mypy now; the test reads its report (tests/conftest.py calls this)."""
    global _background
    if _background is None and importlib.util.find_spec("mypy") is not None:
        _background = _start()


def stop_background() -> None:
    """Kill a background mypy the session no longer waits for (an interrupted run)."""
    if _background is not None and _background.poll() is None:
        _background.kill()
        _background.communicate()


def run_mypy(timeout: float = 900) -> tuple[int, str]:
    global _background
    proc, _background = _background or _start(), None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    lines = [re.sub(r"^[^:]+", lambda m: _repo_path(m.group(0)), ln) for ln in stdout.splitlines()]
    return proc.returncode, "\n".join(lines) + stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is in the [test] extra")
@pytest.mark.timeout(900)  # a cold cache reads torch's and transformers' stubs (minutes)
def test_package_typechecks() -> None:
    rc, report = run_mypy()
    assert rc in (0, 1), report[-3000:]  # 2: mypy itself failed (config, crash)
    errors = [ln for ln in report.splitlines() if ": error:" in ln]
    assert not errors, "mypy errors:\n" + report


if __name__ == "__main__":
    print(run_mypy()[1])
