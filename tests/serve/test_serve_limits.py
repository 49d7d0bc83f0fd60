"""`agentrl serve` under hostile local clients: size caps, the admin token, typed fields.

The server listens to every local process, the agent under training included. Before these
checks any client could read every session, clear them all or post a NaN reward; a wrongly
typed field was a 500; a 2 MB prompt froze every client for 12 s; refused requests left
sessions behind. Runs the real app on loopback with the tiny model and the real HF engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="agentrl serve needs the `serve` extra (fastapi, uvicorn)")
from live_server import admin, live_server  # noqa: E402

from agentrl.chat import ChatFormat  # noqa: E402
from agentrl.config.schema import SamplingConfig  # noqa: E402
from agentrl.serve import create_app  # noqa: E402
from agentrl.serve.limits import ServeLimits, longest_token_chars  # noqa: E402
from agentrl.serve.request import RequestError, parse_request  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def _app(tiny: tuple[Any, Any], **kw: Any) -> Any:
    from agentrl.engines.hf import HFEngine

    model, tok = tiny
    chat = ChatFormat(tok)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    return create_app(HFEngine(model, tok, max_batch_size=8), chat, sampling=sampling, **kw)


@pytest.fixture(scope="module")
def served(tiny: tuple[Any, Any]) -> Iterator[tuple[str, Any]]:
    app = _app(tiny, limits=ServeLimits(max_body_bytes=1 << 20, max_prompt_tokens=256))
    with live_server(app) as url:
        yield url, app


def _chat(url: str, body: Any, sid: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"X-Session-Id": sid} if sid else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60, **kw)


def test_admin_endpoints_need_the_run_token(served: tuple[str, Any]) -> None:
    url, app = served
    assert _chat(url, {"messages": HI}, "a1").status_code == 200  # generation stays open
    reward = f"{url}/v1/trajectories/a1/reward"
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": ""}):
        assert httpx.get(f"{url}/v1/trajectories", headers=headers).status_code == 401
        clear = httpx.get(f"{url}/v1/trajectories", params={"clear": "true"}, headers=headers)
        assert clear.status_code == 401
        assert httpx.post(reward, json={"reward": 1.0}, headers=headers).status_code == 401
    data = httpx.get(f"{url}/v1/trajectories", params={"session": "a1"}, headers=admin(url))
    (seg,) = data.json()["data"]  # nothing was cleared or rewarded without the token
    assert seg["reward"] is None or seg["reward"] == 0.0
    assert httpx.post(reward, json={"reward": 1.0}, headers=admin(url)).json()["segments"] == 1
    assert len(app.state.admin_token) >= 32


@pytest.mark.parametrize(
    "raw", [b'{"reward": NaN}', b'{"reward": Infinity}', b'{"reward": -Infinity}',
            b'{"reward": "1"}', b'{"reward": true}', b'{"reward": [1]}', b"[1]", b"{}",
            b'{"reward": 1, "extra": 2}', b"not json", b'{"reward": 1e999}'],
)  # fmt: skip
def test_rewards_must_be_finite_numbers(served: tuple[str, Any], raw: bytes) -> None:
    url, app = served
    assert _chat(url, {"messages": HI}, "r1").status_code == 200
    post = f"{url}/v1/trajectories/r1/reward"
    r = httpx.post(post, content=raw, headers={**admin(url), "content-type": "application/json"})
    assert r.status_code == 400, r.text
    for t in app.state.recorder.trajectories("r1"):
        assert t.reward is None or t.reward == 0.0


BAD_BODIES: list[tuple[Any, str]] = [
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": [{"role": 3, "content": "x"}]}, "role"),
    ({"messages": [{"role": "user", "content": 5}]}, "content"),
    ({"messages": [{"role": "user", "content": [5]}]}, "content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "text"),
    ({"messages": [{"role": "assistant", "tool_calls": "x"}]}, "tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]}, "tool_calls[0]"),
    (
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}]},
        "function.name",
    ),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]}, "tool_call_id"),
    ({"messages": HI, "model": 3}, "model"),
    ({"messages": HI, "user": ["u"]}, "user"),
    ({"messages": HI, "stream": "yes"}, "stream"),
    ({"messages": HI, "logprobs": 1}, "logprobs"),
    ({"messages": HI, "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"messages": HI, "stop": [1]}, "stop"),
    ({"messages": HI, "stop": {"a": 1}}, "stop"),
    ({"messages": HI, "tools": [3]}, "tools[0]"),
    ({"messages": HI, "tools": [{"function": {"name": "f", "parameters": 1}}]}, "parameters"),
    ({"messages": HI, "tool_choice": {"type": "function", "function": "f"}}, "tool_choice"),
    ({"messages": HI, "response_format": {"type": "json_schema", "json_schema": 1}}, "json_schema"),
    ({"messages": HI, "stream": True, "stream_options": [1]}, "stream_options"),
    ({"messages": HI, "max_tokens": "4"}, "max_tokens"),
    ({"messages": HI, "max_tokens": 10**9}, "max_tokens"),
    ({"messages": HI, "seed": 2**70}, "seed"),
    ({"messages": HI, "n": 1.5}, "n"),
    ([1, 2], "JSON object"),
]


@pytest.mark.parametrize("body, field", BAD_BODIES, ids=[str(i) for i in range(len(BAD_BODIES))])
def test_every_wrongly_typed_field_is_a_400_naming_it(
    served: tuple[str, Any], body: Any, field: str
) -> None:
    url, _ = served
    r = _chat(url, body, "typed")
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]


def test_query_and_header_types_are_400s(served: tuple[str, Any]) -> None:
    url, _ = served
    r = httpx.get(f"{url}/v1/trajectories", params={"clear": "maybe"}, headers=admin(url))
    assert r.status_code == 400
    assert _chat(url, {"messages": HI}, "s" * 300).status_code == 400  # session id too long


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = st.sampled_from(
    ["messages", "model", "max_tokens", "n", "temperature", "top_p", "top_k", "seed", "stop",
     "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "logprobs",
     "top_logprobs", "response_format", "user", "frequency_penalty", "logit_bias"]
)  # fmt: skip
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool", "system", "x"]) | JSON,
        "content": st.text(max_size=5) | JSON,
        "tool_calls": JSON | st.lists(st.fixed_dictionaries({}, optional={"function": JSON})),
        "tool_call_id": JSON,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.dictionaries(FIELDS, JSON, max_size=6)
    | st.builds(
        lambda m, rest: {"messages": m, **rest},
        st.lists(MESSAGE, max_size=3),
        st.dictionaries(FIELDS, JSON, max_size=4),
    )  # fmt: skip
)
def test_any_json_body_is_parsed_or_refused_with_request_error(tiny: Any, body: Any) -> None:
    from agentrl.serve.messages import from_openai

    chat = ChatFormat(tiny[1])
    try:
        req = parse_request(body, chat, SamplingConfig())
    except RequestError:
        return
    try:  # what the server does next with the messages: a ValueError there is a 400
        from_openai(req.messages)
    except ValueError:
        pass


def test_size_caps_refuse_before_reading_or_tokenising(tiny: Any) -> None:
    limits = ServeLimits(max_body_bytes=64 * 1024, max_prompt_tokens=64, max_messages=8)
    app = _app(tiny, limits=limits)
    chat = app.state.recorder.chat
    calls: list[int] = []
    inner = chat.prompt_ids
    chat.prompt_ids = lambda *a, **k: calls.append(1) or inner(*a, **k)  # count tokenising
    longest = longest_token_chars(chat.tokenizer)
    with live_server(app) as url:
        big = b"x" * (limits.max_body_bytes + 1)
        r = httpx.post(f"{url}/v1/chat/completions", content=big, timeout=30)
        assert r.status_code == 413 and "cap" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/v1/chat/completions", content=iter([big[:40_000], big]), timeout=30)
        assert r.status_code == 413  # chunked, no Content-Length: reading stops at the cap
        too_many = {"messages": HI * 9}
        assert "over the cap of 8" in _chat(url, too_many, "c1").json()["error"]["message"]
        hopeless = {"messages": [{"role": "user", "content": "y" * (64 * longest + 1)}]}
        r = _chat(url, hopeless, "c1")
        assert r.status_code == 400 and "at least" in r.json()["error"]["message"]
        assert calls == []  # refused from its length alone
        over = {"messages": [{"role": "user", "content": "ab " * 60}]}  # > 64 tokens
        r = _chat(url, over, "c1")
        assert r.status_code == 400 and "over the cap of 64 tokens" in r.text
        assert len(calls) == 1  # counted exactly once, in a worker thread
        deep = json.dumps({"messages": HI, "metadata": None})[:-1] + ', "x": ' + "[" * 5000
        r = httpx.post(f"{url}/v1/chat/completions", content=deep, timeout=30)
        assert r.status_code == 400 and "nested deeper" in r.text
        assert httpx.get(f"{url}/health").json()["sessions"] == 0  # refusals leave nothing


def test_a_session_over_budget_with_its_history_is_refused_and_kept_as_it_was(tiny: Any) -> None:
    app = _app(tiny, limits=ServeLimits(max_prompt_tokens=80))
    with live_server(app) as url:
        first = _chat(url, {"messages": HI, "max_tokens": 4}, "h1")
        assert first.status_code == 200
        text = first.json()["choices"][0]["message"]["content"] or ""
        before = httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"]
        grown = HI + [{"role": "assistant", "content": text}]
        grown += [{"role": "user", "content": "ab " * 20}] * 3
        r = _chat(url, {"messages": grown}, "h1")
        assert r.status_code == 400 and "tokens" in r.text
        after = httpx.get(f"{url}/v1/trajectories", headers=admin(url)).json()["data"]
        assert after == before
        assert _chat(url, {"messages": HI * 2}, "new").status_code == 200
        r = _chat(url, {"messages": [{"role": "user", "content": "ab " * 70}]}, "refused")
        assert r.status_code == 400
        assert set(app.state.recorder.sessions) == {"h1", "new"}
