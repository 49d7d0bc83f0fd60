"""The child process that runs a user's agent callable: `python -m agentrl.rollout.agent_child`.

Why a process of its own: the agent is the user's program, unchanged, and the model's text
flows through it. In the trainer's process it could reach the gateway's admin token, the
recorder and the env's grader, so an agent (or a model steering it) could score itself; here
it gets the task, a base URL and a dummy key, nothing else. A hang is ended by killing the
process (a thread could not be), and a crash cannot take the trainer down.

Contract: `AGENTRL_AGENT` ("module:function"), `AGENTRL_TASK` (JSON), `AGENTRL_BASE_URL` and
`AGENTRL_RESULT` (a file path) in the environment. The function is called as
`function(task, base_url)` (plus `session=`, `api_key=` if its signature names them; an
`async def` is run with `asyncio.run`); its return value is written to `AGENTRL_RESULT` as
JSON `{"answer": ...}` (a dict return is written as is). Any exception exits with status 1
and its traceback on stderr.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
from collections.abc import Mapping
from typing import Any


def load_callable(spec: str) -> Any:
    """`module:function` (dotted attribute paths allowed after the colon)."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"agent must be 'module:function', got {spec!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec} is not callable")
    return obj


def call_agent(fn: Any, task: dict[str, Any], base_url: str, extra: dict[str, Any]) -> Any:
    """`fn(task, base_url, **the extras its signature names)`, awaited if it is a coroutine."""
    params: Mapping[str, inspect.Parameter] = {}
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        pass
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in extra.items() if takes_all or k in params}
    out = fn(task, base_url, **kwargs)
    return asyncio.run(out) if inspect.iscoroutine(out) else out


def result_json(value: Any) -> dict[str, Any]:
    """What the agent returned, as the result file's object."""
    if isinstance(value, dict):
        return value
    return {"answer": None if value is None else str(value)}


def main() -> int:
    env = os.environ
    fn = load_callable(env["AGENTRL_AGENT"])
    task = json.loads(env["AGENTRL_TASK"])
    extra = {"session": env.get("AGENTRL_SESSION", ""), "api_key": env.get("OPENAI_API_KEY", "")}
    out = result_json(call_agent(fn, task, env["AGENTRL_BASE_URL"], extra))
    with open(env["AGENTRL_RESULT"], "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
