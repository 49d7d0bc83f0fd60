"""`tool_choice` and `response_format` have real effect: they are enforced by sampling under a
grammar mask (llguidance) on the hf engine, in the model's own tool-call syntax, and the
recorded ids are exactly what was sampled. Real openai client, real server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import admin, live_server

from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

from agentrl.serve import create_app  # noqa: E402

pytest.importorskip("llguidance", reason="constrained decoding needs the serve extra")
jsonschema = pytest.importorskip("jsonschema")
hf = pytest.importorskip("agentrl.engines.hf")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"type": "string", "enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
            "required": ["zone"],
        },
    },
}
# A tiny model left free inside an unbounded string may pad it with spaces until max_tokens
# (a model property, not the grammar's): the forced-call tests use bounded arguments.
TOOLS = [build_schema(calculator), WEATHER, CLOCK]
BOUNDED = [WEATHER, CLOCK]
CALC = [{"role": "user", "content": "What is 12 + 30 * 2?"}]
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def server(served_model: Any) -> Iterator[tuple[str, Any, Any]]:
    model, chat = served_model
    engine = hf.HFEngine(model, chat.tokenizer, max_batch_size=8)
    with live_server(create_app(engine, chat, model_name="tiny")) as url:
        yield url, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), chat


def ask(client: Any, session: str, **kw: Any) -> Any:
    kw.setdefault("max_tokens", 80)
    return client.chat.completions.create(
        model="tiny", extra_headers={"X-Session-Id": session}, **kw
    )


def last_segment(url: str, session: str) -> Trajectory:
    data = httpx.get(
        f"{url}/v1/trajectories", params={"session": session}, headers=admin(url)
    ).json()["data"]
    t = Trajectory.from_dict(data[-1])
    t.validate()
    return t


def params_of(name: str) -> dict[str, Any]:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def test_auto_leaves_the_choice_to_the_model(server: tuple[str, Any, Any]) -> None:
    url, client, _ = server
    calc_only = TOOLS[:1]  # the tool the agent was fine-tuned with
    plain = ask(client, "a1", messages=HELLO, tools=calc_only, temperature=0)
    assert not plain.choices[0].message.tool_calls  # the agent answers "hello" in text
    auto = ask(client, "a2", messages=CALC, tools=calc_only, temperature=0, tool_choice="auto")
    assert auto.choices[0].message.tool_calls  # and calls its tool on a sum


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_required_forces_a_valid_call(server: tuple[str, Any, Any], temperature: float) -> None:
    url, client, chat = server
    out = ask(
        client,
        f"r{temperature}",
        messages=HELLO,
        tools=BOUNDED,
        tool_choice="required",
        temperature=temperature,
        seed=1,
    )
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), params_of(call.function.name))
    seg = last_segment(url, f"r{temperature}")
    u = seg.turns[-1]
    text = chat.decode(seg.response_ids[u.start : u.end])
    assert text.startswith("<tool_call>")  # the model's own syntax, sampled token by token
    assert seg.metadata["constrained_turns"] == {"0": "tool_choice=required"}


@pytest.mark.parametrize("force", ["required", "get_weather"])
def test_force_first_tool_call_forces_only_a_sessions_first_turn(
    served_model: Any, force: str
) -> None:
    """`force_first_tool_call` (off by default): a new session's first request with tools
    under `auto` is sampled as one call (of the named tool) and says so in
    `constrained_turns`; the session's next request, and one without tools, are left free."""
    model, chat = served_model
    engine = hf.HFEngine(model, chat.tokenizer, max_batch_size=4)
    with live_server(create_app(engine, chat, force_first_tool_call=force)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        first = ask(client, "f1", messages=HELLO, tools=BOUNDED, temperature=1.0, seed=3)
        (call,) = first.choices[0].message.tool_calls  # `auto`, yet exactly one call
        assert force == "required" or call.function.name == force
        jsonschema.validate(json.loads(call.function.arguments), params_of(call.function.name))
        result = {"role": "tool", "tool_call_id": call.id, "content": "sunny"}
        turn = first.choices[0].message.model_dump(exclude_none=True)
        ask(client, "f1", messages=[*HELLO, turn, result], tools=BOUNDED, max_tokens=8)
        seg = last_segment(url, "f1")
        assert len(seg.turns) == 2 and seg.metadata["appends"] == ["messages"]
        (note,) = seg.metadata["constrained_turns"].values()
        assert list(seg.metadata["constrained_turns"]) == ["0"]
        assert note.endswith("(forced by the server: force_first_tool_call)"), note
        ask(client, "f2", messages=HELLO, max_tokens=8)  # no tools: nothing to force
        assert "constrained_turns" not in last_segment(url, "f2").metadata


def test_named_function_is_the_one_called(server: tuple[str, Any, Any]) -> None:
    url, client, _ = server
    named = {"type": "function", "function": {"name": "get_weather"}}
    out = ask(client, "nm", messages=CALC, tools=TOOLS, tool_choice=named, temperature=0)
    (call,) = out.choices[0].message.tool_calls  # exactly one call, of that function
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), params_of("get_weather"))
    # the next turn extends the same segment token-exact, like any other call
    msgs = [*CALC, out.choices[0].message.model_dump(exclude_none=True)]
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    ask(client, "nm", messages=msgs, tools=TOOLS, max_tokens=8)
    seg = last_segment(url, "nm")
    assert len(seg.turns) == 2 and seg.metadata["appends"] == ["messages"]


def test_none_stops_the_model_calling(server: tuple[str, Any, Any]) -> None:
    url, client, chat = server
    out = ask(client, "no", messages=CALC, tools=TOOLS, tool_choice="none", temperature=0)
    choice = out.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
    seg = last_segment(url, "no")
    u = seg.turns[-1]
    assert (
        chat.tokenizer.convert_tokens_to_ids("<tool_call>") not in seg.response_ids[u.start : u.end]
    )


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "integer", "minimum": -999, "maximum": 999},
        "steps": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2},
        "sure": {"type": "boolean"},
    },
    "required": ["answer", "sure"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_output_validates(server: tuple[str, Any, Any], temperature: float) -> None:
    url, client, _ = server
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
    out = ask(
        client,
        f"js{temperature}",
        messages=CALC,
        response_format=fmt,
        temperature=temperature,
        seed=5,
        max_tokens=120,
        n=2,
    )
    for choice in out.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)
    seg = last_segment(url, f"js{temperature}")
    assert seg.metadata["constrained_turns"] == {"0": "response_format"}


def test_json_object_and_streamed_json(server: tuple[str, Any, Any]) -> None:
    _, client, _ = server
    out = ask(client, "jo", messages=HELLO, response_format={"type": "json_object"}, n=4, seed=3)
    for choice in out.choices:  # an unbounded object may run out of tokens; else it is JSON
        text = choice.message.content or ""
        assert text.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(text), dict)
        else:
            assert choice.finish_reason == "length"
    assert any(c.finish_reason == "stop" for c in out.choices), out
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    stream = ask(
        client, "jst", messages=HELLO, response_format=fmt, stream=True, max_tokens=120, seed=2
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_bad_constraints_are_a_400(server: tuple[str, Any, Any]) -> None:
    _, client, _ = server
    with pytest.raises(openai.BadRequestError, match="tool_choice='required' needs"):
        ask(client, "b", messages=HELLO, tool_choice="required")
    bad = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError, match="response_format"):
        ask(client, "b", messages=HELLO, response_format=bad)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        ask(client, "b", messages=HELLO, tools=BOUNDED, response_format=bad)


def test_a_forced_call_wins_over_response_format(server: tuple[str, Any, Any]) -> None:
    """A harness with structured output and `tool_choice="required"` sends both (OpenAI's API
    takes both): the turn is a call, the format binds the text answers it does not have."""
    url, client, _ = server
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    out = ask(
        client, "rf", messages=HELLO, tools=BOUNDED, tool_choice="required",
        response_format=fmt, temperature=1.0, seed=1,
    )  # fmt: skip
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    call = choice.message.tool_calls[0].function
    jsonschema.validate(json.loads(call.arguments), params_of(call.name))
    assert last_segment(url, "rf").metadata["constrained_turns"] == {"0": "tool_choice=required"}


def test_response_format_with_tools_is_a_call_or_the_answer(
    server: tuple[str, Any, Any],
) -> None:
    """Under `tool_choice: auto` a structured-output agent may still call its tools: each
    sample is either a valid call of an offered tool or content valid against the schema,
    and the grammar accepts both (it was JSON only: such an agent could never call a tool).
    The random tiny model, asked to compute, called a tool in 8 samples of 8."""
    _, client, chat = server
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    out = ask(
        client, "rt", messages=CALC, tools=BOUNDED, response_format=fmt,
        temperature=1.0, seed=11, max_tokens=100, n=8,
    )  # fmt: skip
    for choice in out.choices:
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls", choice
            call = choice.message.tool_calls[0].function
            jsonschema.validate(json.loads(call.arguments), params_of(call.name))
        else:
            assert choice.finish_reason == "stop", choice
            jsonschema.validate(json.loads(choice.message.content), SCHEMA)
    import llguidance

    from agentrl.config.schema import SamplingConfig
    from agentrl.serve.constrain import _ll_tokenizer, request_grammar
    from agentrl.serve.request import parse_request

    body = {"model": "tiny", "messages": CALC, "tools": BOUNDED, "response_format": fmt}
    grammar = request_grammar(parse_request(body, chat, SamplingConfig()), chat)
    assert grammar is not None
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
    answer = '{"answer": 72, "sure": true}'
    for text, ok in ((call, True), (answer, True), ('{"answer": 72}', False)):
        matcher = llguidance.LLMatcher(_ll_tokenizer(chat), grammar, log_level=0)
        took = matcher.consume_tokens(chat.encode(text)) and matcher.is_accepting()
        assert took == ok, (text, matcher.get_error())
