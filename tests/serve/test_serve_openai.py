"""`agentrl serve` against the real `openai` client on loopback: streaming (content and
tool-call chunks), `n` samples, logprobs/top_logprobs equal to the recorded ones, and clear
400s for fields the server does not honour. Engine: the real hf engine on the tiny calc agent."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import admin, live_server, segments

from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory

openai = pytest.importorskip("openai")  # the `test` extra; absent on the GPU host
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

from agentrl.serve import create_app  # noqa: E402

hf = pytest.importorskip("agentrl.engines.hf")

TOOLS = [build_schema(calculator)]
CALC = [{"role": "user", "content": "What is 12 + 30 * 2?"}]


@pytest.fixture(scope="module")
def server(served_model: Any) -> Iterator[tuple[str, Any]]:
    model, chat = served_model
    engine = hf.HFEngine(model, chat.tokenizer, max_batch_size=8)
    with live_server(create_app(engine, chat, model_name="tiny")) as url:
        yield url, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def sampled(t: Trajectory, turn: int = -1) -> tuple[list[int], list[float]]:
    u = t.turns[turn]
    return t.response_ids[u.start : u.end], t.logprobs[u.start : u.end]


def test_streamed_tool_call_matches_the_plain_response(server: tuple[str, Any]) -> None:
    url, client = server
    kw: dict[str, Any] = dict(model="tiny", messages=CALC, tools=TOOLS, temperature=0)
    plain = client.chat.completions.create(**kw, extra_headers={"X-Session-Id": "p"})
    chunks = list(
        client.chat.completions.create(
            **kw,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
            extra_headers={"X-Session-Id": "st"},
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    content = "".join(d.content or "" for d in deltas)
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            if tc.id:  # the first chunk of a call carries id, type and name (as vLLM's)
                assert tc.type == "function" and tc.function.name and not entry["id"]
                entry["id"], entry["name"] = tc.id, tc.function.name
            entry["arguments"] += tc.function.arguments or ""
    want = plain.choices[0].message
    assert want.tool_calls, "the calc agent calls its tool on this prompt"
    assert content.strip() == (want.content or "").strip()
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in want.tool_calls
    ]
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == ["tool_calls"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens > 0
    (seg,) = segments(url, "st")
    ids, lps = sampled(seg)
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [e.logprob for e in streamed] == lps  # every sampled token, as recorded
    assert len(ids) == usage.completion_tokens
    assert [tc.id for tc in seg.messages[-1].tool_calls] == [c["id"] for c in calls.values()]


def test_streamed_text_arrives_in_several_deltas(server: tuple[str, Any]) -> None:
    url, client = server
    kw: dict[str, Any] = dict(model="tiny", messages=[{"role": "user", "content": "hello"}])
    kw |= dict(temperature=0, max_tokens=24)
    plain = client.chat.completions.create(**kw)
    stream = client.chat.completions.create(**kw, stream=True, extra_headers={"X-Session-Id": "t"})
    pieces = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert "".join(pieces).strip() == (plain.choices[0].message.content or "").strip()
    assert len(pieces) > 1  # streamed as decoded, not in one piece at the end
    (seg,) = segments(url, "t")
    assert seg.turns[-1].text.strip().startswith(pieces[0].strip())


def test_n_samples_are_separate_recorded_branches(server: tuple[str, Any]) -> None:
    url, client = server
    out = client.chat.completions.create(
        model="tiny",
        messages=CALC,
        tools=TOOLS,
        n=3,
        temperature=1.0,
        seed=7,
        max_tokens=40,
        logprobs=True,
        top_logprobs=3,
        extra_headers={"X-Session-Id": "n3"},
    )
    assert [c.index for c in out.choices] == [0, 1, 2]
    segs = segments(url, "n3")
    assert len(segs) == 3 and {t.group_id for t in segs} == {"n3"}
    assert [t.metadata.get("branch_of") for t in segs] == [None, 0, 0]
    assert len({tuple(t.prompt_ids) for t in segs}) == 1
    for choice, seg in zip(out.choices, segs, strict=True):
        ids, lps = sampled(seg)
        entries = choice.logprobs.content
        assert [e.logprob for e in entries] == lps
        assert out.usage.completion_tokens == sum(len(sampled(s)[0]) for s in segs)
        for e in entries:
            assert len(e.top_logprobs) == 3
            top = [t.logprob for t in e.top_logprobs]
            assert top == sorted(top, reverse=True) and top[0] >= e.logprob - 1e-6
    # continuing choice 1 extends its own branch, token-exact
    pick = out.choices[1].message
    msgs = [*CALC, pick.model_dump(exclude_none=True)]
    if pick.tool_calls:
        msgs.append({"role": "tool", "tool_call_id": pick.tool_calls[0].id, "content": "72"})
    else:
        msgs.append({"role": "user", "content": "and 2 + 2?"})
    client.chat.completions.create(
        model="tiny", messages=msgs, tools=TOOLS, max_tokens=8, extra_headers={"X-Session-Id": "n3"}
    )
    after = segments(url, "n3")
    assert (
        len(after) == 3
        and len(after[1].turns) == 2
        and after[1].metadata["appends"] == ["messages"]
    )
    assert after[1].response_ids[: len(segs[1].response_ids)] == segs[1].response_ids


def test_streamed_n_choices_interleave(server: tuple[str, Any]) -> None:
    url, client = server
    stream = client.chat.completions.create(
        model="tiny",
        messages=CALC,
        n=2,
        max_tokens=16,
        seed=3,
        stream=True,
        extra_headers={"X-Session-Id": "sn"},
    )
    text: dict[int, str] = {0: "", 1: ""}
    finish: dict[int, str] = {}
    for c in stream:
        for ch in c.choices:
            text[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert set(finish) == {0, 1}
    segs = segments(url, "sn")
    assert [s.messages[-1].content.strip() for s in segs] == [text[0].strip(), text[1].strip()]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
        ({"best_of": 2}, "best_of"),
        ({"guided_json": {}}, "guided_json"),
        ({"n": 0}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "image_url",
        ),
    ],
)
def test_unsupported_fields_are_a_400_naming_them(
    server: tuple[str, Any], extra: dict[str, Any], field: str
) -> None:
    url, client = server
    with pytest.raises(openai.BadRequestError, match=field):
        client.chat.completions.create(model="tiny", messages=CALC, tools=TOOLS, extra_body=extra)
    # neutral values of the same fields are accepted
    client.chat.completions.create(
        model="tiny", messages=CALC, max_tokens=2, frequency_penalty=0, presence_penalty=0
    )


def test_a_client_leaving_mid_stream_closes_its_segment(server: tuple[str, Any]) -> None:
    url, client = server
    kw: dict[str, Any] = dict(model="tiny", messages=[{"role": "user", "content": "hello"}])
    stream = client.chat.completions.create(
        **kw, max_tokens=400, stream=True, extra_headers={"X-Session-Id": "gone"}
    )
    next(iter(stream))  # the role chunk, then hang up
    stream.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the server notices on its next write
        data = httpx.get(
            f"{url}/v1/trajectories", params={"session": "gone"}, headers=admin(url)
        ).json()["data"]
        if data and data[0]["termination"] == "engine_error":
            break
        time.sleep(0.2)
    assert data[0]["termination"] == "engine_error" and data[0]["turns"] == []
    assert "stream ended" in data[0]["metadata"]["error"]
    again = client.chat.completions.create(  # the session goes on in a fresh segment
        **kw, max_tokens=4, extra_headers={"X-Session-Id": "gone"}
    )
    assert again.choices[0].message is not None
    assert [s.metadata["segment"] for s in segments(url, "gone")] == [0, 1]
