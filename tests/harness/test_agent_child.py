"""The child process a `module:function` agent runs in carries nothing of the trainer.

Why it matters: one child per episode, sixteen at once on a small box. A child that imported
the `agentrl.rollout` package would load torch and the engines (about 230 MB and seconds of
CPU each) for an agent that needs neither.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentrl.config.schema import HarnessConfig
from agentrl.rollout.harness import run_agent

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_agent_child_loads_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{REPO}")
    cfg = HarnessConfig(agent="harness_agents:imported_modules", timeout_s=300)
    run = asyncio.run(run_agent(cfg, {"prompt": "What is 1 + 1?"}, "http://127.0.0.1:9", "s"))
    assert run.status == "ok", run.error
    assert run.result == {"answer": ""}
