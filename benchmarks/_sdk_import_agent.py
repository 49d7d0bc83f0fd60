"""harness_startup.py's agent: the import closure of examples/harness/agents_sdk_calc.py
(the OpenAI Agents SDK, openai, pydantic), then an answer without a model call, so a run's
cost is its start-up."""

from typing import Any

import examples.harness.agents_sdk_calc  # noqa: F401 - the closure being measured


def agent(task: dict[str, Any], base_url: str) -> str:
    return "started"
