"""The harness stage's tests run the examples in examples/harness as child processes."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(autouse=True)
def agents_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent child imports `tiny_agents` and the examples (and agentrl from this checkout);
    litellm reads its price table from the package, not the network."""
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{REPO / 'examples' / 'harness'}:{REPO}")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
