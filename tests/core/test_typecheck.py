"""mypy runs over the whole package, as installed: `agentrl.envs` is `envs/` (see
[tool.setuptools] in pyproject.toml), which mypy cannot read from an editable install's
import hook, so the test lays the installed tree out as symlinks and checks `-p agentrl`.
Config: [tool.mypy] in pyproject.toml. `python tests/core/test_typecheck.py` prints the report.

BASELINE holds the errors allowed per file: files other #20 work is rewriting (trainer/,
workers/, engines/, algorithms/, rollout/runner.py), and a few not fixed yet. It only
shrinks: a file over its count fails, and so does a file under it (lower the number). Every
other file has none. The lead clears the rewritten files' entries once those rewrites are
merged; the goal is an empty dict.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAPPED = {"envs": "envs", "tools": "tools", "sandboxes": "sandboxes", "configs": "configs"}

# Errors allowed per file (mypy 2.4). Only shrinks; see the module docstring.
BASELINE: dict[str, int] = {
    # Being rewritten by other #20 work (wiring: trainer/, algorithms/; engine: engines/).
    "agentrl/algorithms/optimal_baseline.py": 5,
    "agentrl/engines/_cudagraph.py": 1,
    "agentrl/engines/_prefix_share.py": 1,
    "agentrl/engines/hf_fast.py": 3,
    "agentrl/engines/vllm.py": 1,
    "agentrl/trainer/actor.py": 4,
    "agentrl/trainer/build.py": 1,
    "agentrl/trainer/export.py": 5,
    "agentrl/trainer/multimodal.py": 5,
    "agentrl/trainer/roles.py": 4,
    "agentrl/trainer/trainer.py": 2,
    # Not fixed yet: torch/transformers/third-party signatures that need a careful reading
    # (backends and packed attention are under #21's speed work too).
    "agentrl/backends/_megatron_grads.py": 4,
    "agentrl/backends/fsdp2.py": 1,
    "agentrl/chat/parsers.py": 1,
    "agentrl/cli/rollout.py": 1,
    "agentrl/models/load.py": 4,
    "agentrl/models/packed_attention.py": 6,
    "envs/core.py": 1,
    "envs/games/adapter.py": 2,
    "envs/games/guess.py": 1,
    "envs/interop/openenv_env.py": 1,
    "tools/mcp_tools.py": 1,
}


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


def run_mypy() -> tuple[int, str]:
    base = _tree()
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "agentrl", "--config-file",
         str(REPO / "pyproject.toml"), "--cache-dir", str(base / "cache"),
         "--no-error-summary", "--hide-error-context"],
        cwd=base / "tree", capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = [
        re.sub(r"^[^:]+", lambda m: _repo_path(m.group(0)), ln) for ln in out.stdout.splitlines()
    ]
    return out.returncode, "\n".join(lines) + out.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is in the [test] extra")
@pytest.mark.timeout(900)  # a cold cache reads torch's and transformers' stubs (minutes)
def test_package_typechecks() -> None:
    rc, report = run_mypy()
    assert rc in (0, 1), report[-3000:]  # 2: mypy itself failed (config, crash)
    errors = [ln for ln in report.splitlines() if ": error:" in ln]
    counts = Counter(ln.split(":", 1)[0] for ln in errors)
    over = {f: n for f, n in counts.items() if n > BASELINE.get(f, 0)}
    assert not over, "mypy errors (file: count):\n" + "\n".join(
        ln for ln in errors if ln.split(":", 1)[0] in over
    )
    under = {f: counts.get(f, 0) for f, n in BASELINE.items() if counts.get(f, 0) < n}
    assert not under, f"fewer errors than BASELINE allows; lower it in {__file__}: {under}"


if __name__ == "__main__":
    print(run_mypy()[1])
