"""The env-tools route (`agentrl.rollout.env_tools`) on a real env, without a model.

`math/calc-easy-v0` (its calculator tool, `max_turns` 4) behind the route on a FastAPI app,
driven over HTTP by starlette's test client: a call is one `env.step`, the env's own checks
answer bad calls, the episode's end closes the route for calls (409), and a session is only
served while it is open.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install 'agentrl[serve]'")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

import agentrl  # noqa: E402
from agentrl.rollout.env_tools import EnvTools  # noqa: E402
from agentrl.serve.limits import HTTPError  # noqa: E402

URL = "/s/ep1/env/tools"


def served() -> tuple[TestClient, EnvTools]:
    from agentrl.rollout.gateway_host import SessionPaths

    app = FastAPI()

    @app.exception_handler(HTTPError)
    async def refused(request: Any, e: HTTPError) -> Any:
        return e.response()

    tools = EnvTools()
    tools.mount(app)
    return TestClient(SessionPaths(app)), tools


def test_a_call_is_one_env_step_until_the_episode_ends() -> None:
    client, tools = served()
    env = agentrl.make("math/calc-easy-v0")
    env.reset(seed=0)
    assert client.post(f"{URL}/calculator", json={"arguments": {}}).status_code == 404
    session = tools.open("ep1", env)
    ok = client.post(f"{URL}/calculator", json={"arguments": {"expression": "6 * 7"}})
    assert ok.status_code == 200 and ok.json() == {"output": "42", "done": False}
    bad = client.post(f"{URL}/calculator", json={"arguments": {"nope": 1}}).json()
    assert bad["done"] is False and "expression" in bad["output"]  # the env's own check
    unknown = client.post(f"{URL}/no_such_tool", json={"arguments": {}}).json()
    assert "no_such_tool" in unknown["output"]
    assert client.post(f"{URL}/calculator", json=[1]).status_code == 400
    last = client.post(f"{URL}/calculator", json={"arguments": {"expression": "1"}}).json()
    assert last["done"] is True and session.ended is not None  # max_turns: reward fixed here
    assert session.ended[0] == 0.0 and session.calls == 4
    assert client.post(f"{URL}/calculator", json={"arguments": {}}).status_code == 409
    env.close()


def test_closed_sessions_and_failing_envs() -> None:
    import asyncio

    client, tools = served()
    env = agentrl.make("math/calc-easy-v0")  # never reset: its step raises
    session = tools.open("ep1", env)
    r = client.post(f"{URL}/calculator", json={"arguments": {"expression": "1"}})
    assert r.status_code == 500 and "reset" in session.error  # an env_error, not a reward
    assert asyncio.run(tools.close("ep1")) is session
    assert client.post(f"{URL}/calculator", json={"arguments": {}}).status_code == 404
    other = client.post("/s/ep2/env/tools/calculator", json={"arguments": {}})
    assert other.status_code == 404
    env.close()
