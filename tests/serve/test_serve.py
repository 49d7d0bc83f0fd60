"""The OpenAI-compatible proxy, driven by the real `openai` client over loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="agentrl serve needs the `serve` extra (fastapi, uvicorn)")
from live_server import admin, live_server
from simple_engine import Recorder, SimpleTorchEngine

from agentrl.chat import ChatFormat
from agentrl.serve.messages import from_openai
from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory, read_jsonl

openai = pytest.importorskip("openai")  # the `test` extra; absent on the GPU host
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

from agentrl.serve import create_app  # noqa: E402

TOOLS = [build_schema(calculator)]


def ask(client: openai.OpenAI, msgs: list[dict[str, Any]], session: str) -> Any:
    return client.chat.completions.create(
        model="tiny",
        messages=msgs,
        tools=TOOLS,
        temperature=0,
        max_tokens=48,
        extra_headers={"X-Session-Id": session},
    )


@pytest.mark.parametrize("kind", ["simple", "hf"])
def test_two_turn_tool_conversation_is_token_exact(
    kind: str, served_model: Any, tmp_path: Path
) -> None:
    model, chat = served_model
    if kind == "hf":
        hf = pytest.importorskip("agentrl.engines.hf")
        inner = hf.HFEngine(model, chat.tokenizer, max_batch_size=4)
    else:
        inner = SimpleTorchEngine(model, chat.stop_token_ids)
    engine = Recorder(inner)
    out = tmp_path / "served.jsonl"
    with live_server(create_app(engine, chat, model_name="tiny", out=out)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "What is 12 + 30 * 2?"}]
        first = ask(client, msgs, "s1").choices[0]
        assert first.finish_reason == "tool_calls", first
        call = first.message.tool_calls[0]
        assert call.function.name == "calculator"
        msgs.append(first.message.model_dump(exclude_none=True))
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": "72"})
        second = ask(client, msgs, "s1")
        assert second.usage.completion_tokens > 0
        data = httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"]
        httpx.post(
            f"{url}/v1/trajectories/s1/reward", json={"reward": 1.0}, headers=admin(url)
        ).raise_for_status()
    assert len(data) == 1
    traj = Trajectory.from_dict(data[0])
    traj.validate()
    (p1, r1), (p2, r2) = engine.log["s1"]
    prompt = chat.prompt_ids(from_openai(msgs[:1]), TOOLS)
    obs = chat.observation_ids(from_openai(msgs[2:]), TOOLS, sampled_ids=r1.token_ids)
    assert p1 == prompt and p2 == prompt + r1.token_ids + obs  # the model saw its own tokens
    assert traj.prompt_ids == prompt
    assert traj.response_ids == r1.token_ids + obs + r2.token_ids
    assert traj.loss_mask == [1] * len(r1.token_ids) + [0] * len(obs) + [1] * len(r2.token_ids)
    assert [lp for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m] == (
        r1.logprobs + r2.logprobs
    )
    assert traj.metadata["appends"] == ["messages"] and traj.group_id == "s1"
    saved = list(read_jsonl(out))  # dumped on shutdown, reward included
    assert len(saved) == 1 and saved[0].response_ids == traj.response_ids
    assert saved[0].reward == 1.0


def test_rewritten_history_starts_a_new_segment(served_model: Any) -> None:
    model, chat = served_model
    app = create_app(SimpleTorchEngine(model, chat.stop_token_ids), chat)
    with live_server(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        ask(client, [{"role": "user", "content": "What is 1 + 2?"}], "s2")
        ask(client, [{"role": "user", "content": "What is 5 * 5?"}], "s2")  # not an extension
        client.chat.completions.create(  # session from the `user` field
            model="tiny", messages=[{"role": "user", "content": "hi"}], user="u9", max_tokens=4
        )
        segs = httpx.get(
            f"{url}/v1/trajectories", params={"session": "s2"}, headers=admin(url)
        ).json()["data"]
        assert [s["metadata"]["segment"] for s in segs] == [0, 1]
        for s in segs:
            Trajectory.from_dict(s).validate()
        all_ = httpx.get(
            f"{url}/v1/trajectories", params={"clear": "true"}, headers=admin(url)
        ).json()["data"]
        assert {t["group_id"] for t in all_} == {"s2", "u9"}
        assert httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"] == []


def test_unsupported_requests_are_rejected(served_model: Any) -> None:
    model, chat = served_model
    with live_server(create_app(SimpleTorchEngine(model, chat.stop_token_ids), chat)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="'presence_penalty'.*change sampling"):
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "x"}], presence_penalty=1.0
            )
        # a field that cannot change sampling is ignored (with a logged note), not refused
        ok = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=2,
            extra_body={"foo": 1},
        )
        assert ok.choices
        with pytest.raises(openai.BadRequestError, match="top_logprobs: the SimpleTorchEngine"):
            client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "x"}],
                logprobs=True,
                top_logprobs=2,
            )
        assert [m.id for m in client.models.list()] == ["agentrl"]
        assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_engine_failure_is_a_500_and_recorded(served_model: Any) -> None:
    _, chat = served_model

    class Down(SimpleTorchEngine):
        def __init__(self, chat: ChatFormat) -> None:
            self.chat = chat

        async def generate(self, *a: Any, **kw: Any) -> Any:
            raise RuntimeError("device lost")

    with live_server(create_app(Down(chat), chat)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="device lost"):
            ask(client, [{"role": "user", "content": "x"}], "s3")
        seg = httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"][0]
        assert seg["termination"] == "engine_error" and "device lost" in seg["metadata"]["error"]


def test_engine_failure_mid_stream_is_an_error_event_and_recorded(served_model: Any) -> None:
    _, chat = served_model

    class Down(SimpleTorchEngine):
        def __init__(self, chat: ChatFormat) -> None:
            self.chat = chat

        async def generate(self, *a: Any, **kw: Any) -> Any:
            raise RuntimeError("device lost")

    with live_server(create_app(Down(chat), chat)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            n=2,
            stream_options={"include_usage": True},
            extra_headers={"X-Session-Id": "s4"},
        )
        with pytest.raises(openai.APIError, match="device lost"):
            list(stream)
        segs = httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"]
        assert [s["termination"] for s in segs] == ["engine_error", "engine_error"]
        assert all("device lost" in s["metadata"]["error"] for s in segs[:1])
