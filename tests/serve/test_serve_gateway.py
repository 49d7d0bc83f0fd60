"""The gateway's wire formats driven by the real SDKs over loopback: `openai` (chat completions
with `return_token_ids`, the Responses API with a function tool over two turns, with
`previous_response_id`, streamed) and `anthropic` (messages with tools, a `tool_result`
follow-up, streamed), each at a session-scoped base URL. Every test checks that what was
recorded is token-exact: the engine saw the recorded ids (its own sampled tokens included),
and the first prompt is exactly the chat template's rendering of the translated messages.
Engine: the real hf engine on the tiny calc agent, wrapped to log what it was given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import admin, live_server, segments
from simple_engine import Recorder

from agentrl.serve.limits import ServeLimits
from agentrl.serve.messages import from_openai
from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory
from agentrl.viewer.episodes import episode_record, summary

openai = pytest.importorskip("openai")
anthropic_sdk = pytest.importorskip("anthropic")
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")
hf = pytest.importorskip("agentrl.engines.hf")

from agentrl.serve import create_app  # noqa: E402

CHAT_TOOLS = [build_schema(calculator)]
FN = CHAT_TOOLS[0]["function"]
RESP_TOOLS = [{"type": "function", **FN}]
ANTH_TOOLS = [
    {"name": FN["name"], "description": FN["description"], "input_schema": FN["parameters"]}
]
QUESTION = "What is 12 + 30 * 2?"


@pytest.fixture(scope="module")
def server(served_model: Any) -> Iterator[tuple[str, Recorder, Any]]:
    model, chat = served_model
    inner = hf.HFEngine(model, chat.tokenizer, max_batch_size=8)
    engine = Recorder(inner)
    engine.features = inner.features  # token streaming, as the plain engine
    limits = ServeLimits(max_prompt_tokens=1024)
    with live_server(create_app(engine, chat, model_name="tiny", limits=limits)) as url:
        yield url, engine, chat


def assert_token_exact(
    engine: Recorder, chat: Any, url: str, sid: str, first: list[dict[str, Any]]
) -> Trajectory:
    """One segment; the engine's k-th prompt is the segment's ids before turn k (so the model
    saw its own sampled tokens), each turn's ids and logprobs are what it sampled, and the
    first prompt is the template's rendering of `first` (the chat form of the request)."""
    (traj,) = segments(url, sid)
    log = engine.log[sid]
    assert len(log) == len(traj.turns) and traj.metadata["appends"] == ["messages"] * (len(log) - 1)
    assert log[0][0] == traj.prompt_ids == chat.prompt_ids(from_openai(first), CHAT_TOOLS)
    for (prompt, result), turn in zip(log, traj.turns, strict=True):
        assert prompt == traj.prompt_ids + traj.response_ids[: turn.start]
        assert traj.response_ids[turn.start : turn.end] == result.token_ids
        assert traj.loss_mask[turn.start : turn.end] == [1] * len(result.token_ids)
        assert traj.logprobs[turn.start : turn.end] == result.logprobs
    return traj


def test_chat_completions_return_token_ids_at_a_session_url(server: Any) -> None:
    url, engine, chat = server
    client = openai.OpenAI(base_url=f"{url}/s/chat-ids/v1", api_key="x", max_retries=0)
    msgs = [{"role": "user", "content": QUESTION}]
    raw = client.chat.completions.with_raw_response.create(
        model="tiny",
        messages=msgs,
        tools=CHAT_TOOLS,
        temperature=0,
        extra_body={"return_token_ids": True},
        metadata={"run": "x"},  # harmless: ignored with a logged note
        store=False,
        reasoning_effort="low",
    )
    assert raw.headers["x-session-id"] == "chat-ids"
    body = json.loads(raw.text)
    ((prompt, result),) = engine.log["chat-ids"]
    assert body["prompt_token_ids"] == prompt
    assert body["choices"][0]["token_ids"] == result.token_ids
    assert_token_exact(engine, chat, url, "chat-ids", msgs)
    plain = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    chunks = list(
        plain.chat.completions.create(
            model="tiny",
            messages=msgs,
            tools=CHAT_TOOLS,
            temperature=0,
            stream=True,
            extra_body={"return_token_ids": True},
            extra_headers={"X-Session-ID": "chat-st"},
        )
    )
    streamed = [
        t for c in chunks for ch in c.choices for t in (ch.model_extra or {}).get("token_ids", [])
    ]
    assert (chunks[0].model_extra or {})["prompt_token_ids"] == prompt
    assert streamed == engine.log["chat-st"][0][1].token_ids
    with pytest.raises(openai.BadRequestError, match="frequency_penalty"):  # changes sampling
        client.chat.completions.create(model="tiny", messages=msgs, frequency_penalty=0.5)


def test_responses_two_turns_with_a_function_tool(server: Any) -> None:
    url, engine, chat = server
    client = openai.OpenAI(base_url=f"{url}/s/resp/v1", api_key="x", max_retries=0)
    kw: dict[str, Any] = dict(model="tiny", tools=RESP_TOOLS, temperature=0, max_output_tokens=64)
    first = client.responses.create(input=QUESTION, **kw)
    assert first.status == "completed"
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "calculator"
    history: list[Any] = [{"role": "user", "content": QUESTION}]
    history += [o.model_dump(exclude_none=True) for o in first.output]
    history += [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "72"}]
    second = client.responses.create(input=history, **kw)
    assert second.status in ("completed", "incomplete") and second.usage.output_tokens > 0
    assert_token_exact(engine, chat, url, "resp", [{"role": "user", "content": QUESTION}])

    # the same conversation by previous_response_id: the session follows the response
    plain = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    a = plain.responses.create(input=QUESTION, extra_headers={"X-Session-ID": "prev"}, **kw)
    call = next(o for o in a.output if o.type == "function_call")
    out = [{"type": "function_call_output", "call_id": call.call_id, "output": "72"}]
    raw = plain.responses.with_raw_response.create(previous_response_id=a.id, input=out, **kw)
    assert raw.headers["x-session-id"] == "prev"
    b = raw.parse()
    assert b.previous_response_id == a.id and b.output
    traj = assert_token_exact(engine, chat, url, "prev", [{"role": "user", "content": QUESTION}])
    assert traj.turns[0].tool_calls[0].id == call.call_id


def test_responses_streaming_matches_the_plain_response(server: Any) -> None:
    url, engine, chat = server
    client = openai.OpenAI(base_url=f"{url}/s/resp-st/v1", api_key="x", max_retries=0)
    kw: dict[str, Any] = dict(model="tiny", tools=RESP_TOOLS, temperature=0, max_output_tokens=64)
    other = openai.OpenAI(base_url=f"{url}/s/resp-pl/v1", api_key="x", max_retries=0)
    plain = other.responses.create(input=QUESTION, **kw)
    events = list(client.responses.create(input=QUESTION, stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    calls = [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"]
    want = [(o.name, json.loads(o.arguments)) for o in plain.output if o.type == "function_call"]
    assert calls == want and calls
    assert "response.function_call_arguments.done" in kinds
    assert_token_exact(engine, chat, url, "resp-st", [{"role": "user", "content": QUESTION}])


def test_responses_cut_by_max_output_tokens_end_incomplete(server: Any) -> None:
    """As OpenAI sends it: a response cut by `max_output_tokens` is `status: incomplete`, and
    streamed its last event is `response.incomplete`, not `response.completed` (the Agents
    SDK reads the terminal event: it raised on the plain response and took the streamed one
    as finished)."""
    url, engine, chat = server
    kw: dict[str, Any] = dict(model="tiny", input=QUESTION, tools=RESP_TOOLS, temperature=0)
    kw["max_output_tokens"] = 2
    plain = openai.OpenAI(base_url=f"{url}/s/cut/v1", api_key="x", max_retries=0)
    got = plain.responses.create(**kw)
    assert got.status == "incomplete"
    assert [(i.type, i.status) for i in got.output] == [("message", "incomplete")]
    client = openai.OpenAI(base_url=f"{url}/s/cut-st/v1", api_key="x", max_retries=0)
    events = list(client.responses.create(stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 2
    assert [i.status for i in final.output if i.type == "message"] in ([], ["incomplete"])
    assert_token_exact(engine, chat, url, "cut-st", [{"role": "user", "content": QUESTION}])


def test_anthropic_messages_with_tools_and_a_tool_result(server: Any) -> None:
    url, engine, chat = server
    client = anthropic_sdk.Anthropic(base_url=f"{url}/s/anth", api_key="x", max_retries=0)
    system = "You are a calculator agent."
    kw: dict[str, Any] = dict(
        model="tiny", max_tokens=64, tools=ANTH_TOOLS, extra_body={"temperature": 0}
    )
    msgs: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.messages.create(messages=msgs, **kw)
    assert first.stop_reason == "tool_use", first
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "calculator" and isinstance(use.input, dict)
    msgs.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "72"}
    msgs.append({"role": "user", "content": [result]})
    raw = client.messages.with_raw_response.create(messages=msgs, **kw)
    assert raw.headers["x-session-id"] == "anth"
    second = raw.parse()
    assert second.stop_reason in ("end_turn", "tool_use", "max_tokens")
    first_chat = [{"role": "user", "content": QUESTION}]
    assert_token_exact(engine, chat, url, "anth", first_chat)

    # a system prompt (as blocks) and stop sequences
    sys_client = anthropic_sdk.Anthropic(base_url=f"{url}/s/anth-sys", api_key="x", max_retries=0)
    said = sys_client.messages.create(
        messages=msgs[:1],
        system=[{"type": "text", "text": system}],
        stop_sequences=["calculator"],
        **kw,
    )
    assert said.stop_reason in ("stop_sequence", "end_turn", "tool_use", "max_tokens")
    if said.stop_reason == "stop_sequence":
        assert said.stop_sequence == "calculator"
    with_system = [{"role": "system", "content": system}, *first_chat]
    assert_token_exact(engine, chat, url, "anth-sys", with_system)

    st = anthropic_sdk.Anthropic(base_url=f"{url}/s/anth-st", api_key="x", max_retries=0)
    with st.messages.stream(messages=msgs[:1], **kw) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        (b.type, getattr(b, "input", None)) for b in first.content
    ]
    assert final.stop_reason == "tool_use"
    assert_token_exact(engine, chat, url, "anth-st", first_chat)


def test_anthropic_system_turn_inside_messages(server: Any) -> None:
    """Claude Code 2.1 sends its environment as a `system` turn inside `messages`, at
    `/v1/messages?beta=true`: it stays a system message where it is, token-exact."""
    url, engine, chat = server
    env = "# Environment\n - Primary working directory: /tmp/w"
    body = {
        "model": "tiny",
        "max_tokens": 16,
        "tools": ANTH_TOOLS,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
            {"role": "system", "content": [{"type": "text", "text": env}]},
        ],
    }
    r = httpx.post(f"{url}/s/anth-systurn/v1/messages?beta=true", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["type"] == "message"
    first = [{"role": "user", "content": QUESTION}, {"role": "system", "content": env}]
    assert_token_exact(engine, chat, url, "anth-systurn", first)


def test_overflow_is_context_length_exceeded_before_any_stream(server: Any) -> None:
    url, engine, chat = server
    client = openai.OpenAI(base_url=f"{url}/s/big/v1", api_key="x", max_retries=0)
    long = [{"role": "user", "content": "hello " * 3000}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="tiny", messages=long, stream=stream)
        assert err.value.code == "context_length_exceeded"
    an = anthropic_sdk.Anthropic(base_url=f"{url}/s/big", api_key="x", max_retries=0)
    with pytest.raises(anthropic_sdk.BadRequestError, match="context"):
        an.messages.create(model="tiny", max_tokens=8, messages=long, stream=True)
    # max_tokens past the context is clamped to what is left (vLLM's get_max_tokens)
    msgs = [{"role": "user", "content": QUESTION}]
    done = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=30000)
    assert done.usage.prompt_tokens + done.usage.completion_tokens <= 1025
    assert segments(url, "big")  # the clamped request was recorded; the refused ones not


def test_rewards_and_split_episodes(server: Any) -> None:
    url, engine, chat = server
    client = openai.OpenAI(base_url=f"{url}/s/split/v1", api_key="x", max_retries=0)
    kw: dict[str, Any] = dict(model="tiny", temperature=0, max_tokens=8)
    client.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **kw)
    # the harness rewrites its history (drops the turn): a second segment of the episode
    client.chat.completions.create(messages=[{"role": "user", "content": "bye"}], **kw)
    with httpx.Client(base_url=url, headers=admin(url)) as http:
        bad = http.post("/v1/trajectories/split/reward", content=b"{not json")
        assert bad.status_code == 400
        assert http.post("/v1/trajectories/split/reward", json={"r": 1}).status_code == 400
        unknown = http.post("/v1/trajectories/nobody/reward", json={"reward": 1.0})
        assert unknown.status_code == 404
        ok = http.post("/v1/trajectories/split/reward", json={"reward": 0.5})
        assert ok.json() == {"session": "split", "segments": 2}  # same connection, still up
    segs = segments(url, "split")
    assert [s.reward for s in segs] == [0.5, 0.5]
    assert {s.metadata["episode"] for s in segs} == {segs[0].metadata["episode"]}
    assert [s.metadata["episode_segments"] for s in segs] == [2, 2]
    # the viewer shows the split (a badge per segment, a count in the header)
    records = [episode_record(t, i, lambda ids: [str(x) for x in ids]) for i, t in enumerate(segs)]
    assert [r["split"] for r in records] == [2, 2]
    assert summary(records)["split_episodes"] == 1
