"""One chat-completions request body, checked field by field.

Why: a field we silently ignore is a wrong answer the client cannot see (a `tool_choice` that
does nothing, a `response_format` that is not enforced). A field that would change sampling
is honoured, accepted at its neutral value, or rejected with a 400 naming it; any other field
(`metadata`, `store`, `reasoning_effort`, a newer SDK's bookkeeping) cannot change what is
sampled, so it is accepted and noted once in the log: a harness runs unchanged. Every
field's type is checked here too (a wrongly typed one was a 500 from deep in the server), and
the sizes against `ServeLimits`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import SamplingParams
from agentrl.serve.limits import ServeLimits

# Fields honoured as the OpenAI API (and vLLM's server) define them.
SUPPORTED = frozenset(
    {
        "messages",
        "model",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "logprobs",
        "top_logprobs",
        "response_format",
        "user",
        "return_token_ids",
    }
)
# Accepted only with these neutral values (what the client sends when it means "off").
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
    "functions": (None, []),
    "function_call": (None,),
    "modalities": (None, ["text"]),
    "min_p": (None, 0, 0.0),
    "echo": (None, False),
    "skip_special_tokens": (None, True),
    "prediction": (None,),
    "audio": (None,),
    "web_search_options": (None,),
    "best_of": (None, 1),
    "use_beam_search": (None, False),
    "length_penalty": (None, 1, 1.0),
    "min_tokens": (None, 0),
    "bad_words": (None, []),
    "allowed_token_ids": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
}
log = logging.getLogger("agentrl.serve")
_NOTED: set[str] = set()


def ignore_field(name: str) -> None:
    """A field that cannot change what is sampled (`metadata`, `store`, `reasoning_effort`,
    a new SDK's bookkeeping): accepted, and noted in the log once per field name."""
    if name not in _NOTED and len(_NOTED) < 1024:
        _NOTED.add(name)
        log.warning("ignoring request field %r (it does not change sampling)", name[:200])


MAX_N = 64
MAX_TOP_LOGPROBS = 20
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class RequestError(ValueError):
    """A request the server refuses (HTTP 400); the message names the field."""

    code: str | None = None  # the error body's `code` (see `generate.ContextLengthError`)


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    model: str | None
    params: SamplingParams
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "auto"  # "none" | "auto" | "required" | {"name": ..}
    parallel_tool_calls: bool = True
    logprobs: bool = False
    top_logprobs: int = 0
    response_format: dict[str, Any] | None = None  # {"schema": {...}} when constrained
    user: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    text_chars: int = 0
    return_token_ids: bool = False  # characters of message text, tool arguments and schemas
    # set when the server, not the client, forced `tool_choice` (`force_first_tool_call`)
    forced_by_server: bool = False

    @property
    def named_tool(self) -> str | None:
        return self.tool_choice.get("name") if isinstance(self.tool_choice, dict) else None

    @property
    def forced_call(self) -> bool:
        """`tool_choice` required or a named function: the turn must be a call."""
        return self.tool_choice == "required" or self.named_tool is not None


def _int(body: dict[str, Any], key: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        top = f"..{hi}" if hi is not None else " or more"
        raise RequestError(f"{key} must be {lo}{top}, got {value}")
    return value


def _number(body: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise RequestError(f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _tool_choice(body: dict[str, Any], tools: list[dict[str, Any]] | None) -> str | dict:
    choice = body.get("tool_choice")
    names = [(t.get("function") or {}).get("name") for t in tools or []]
    if choice is None:
        return "auto"
    if choice in ("none", "auto", "required"):
        if choice == "required" and not tools:
            raise RequestError("tool_choice='required' needs a non-empty tools list")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or name not in names:
            raise RequestError(f"tool_choice names function {name!r}, not among tools {names}")
        return {"name": name}
    raise RequestError(
        f"tool_choice must be 'none', 'auto', 'required' or a function, got {choice!r}"
    )


def _response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"schema": {"type": "object"}}
    if kind == "json_schema":
        spec = fmt.get("json_schema") or {}
        if not isinstance(spec, dict):
            raise RequestError("response_format.json_schema must be an object")
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object")
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise RequestError(f"response_format.json_schema.name must be a string, got {name!r}")
        return {"schema": schema, "name": name}
    raise RequestError(
        f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}"
    )


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{key} must be true or false, got {value!r}")
    return bool(value)


def _str(value: Any, where: str, limit: int | None = None) -> str | None:
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where} must be a string, got {type(value).__name__}")
    if value is not None and limit is not None and len(value) > limit:
        raise RequestError(f"{where} has {len(value)} characters, over the cap of {limit}")
    return value


def _content_chars(content: Any, where: str) -> int:
    """Characters of one message's content; its shape is checked (`messages.from_openai`
    reads it after this)."""
    if content is None or isinstance(content, str):
        return len(content or "")
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string, null or a list of parts")
    chars = 0
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise RequestError(f"{where}.content[{j}] must be an object with a 'type'")
        chars += len(_str(part.get("text"), f"{where}.content[{j}].text") or "")
    return chars


def _tool_call_chars(call: Any, where: str, limits: ServeLimits) -> int:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise RequestError(f"{where} must be an object with a 'function' object")
    fn = call["function"]
    name = _str(fn.get("name"), f"{where}.function.name", limits.max_id_chars) or ""
    _str(call.get("id"), f"{where}.id", limits.max_id_chars)
    args = fn.get("arguments")
    if isinstance(args, dict):
        return len(name) + len(json.dumps(args))
    return len(name) + len(_str(args, f"{where}.function.arguments (a JSON string)") or "")


def _messages(body: dict[str, Any], limits: ServeLimits) -> tuple[list[dict[str, Any]], int]:
    """The messages, every field's type checked; and their characters of text."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    if len(messages) > limits.max_messages:
        raise RequestError(f"{len(messages)} messages, over the cap of {limits.max_messages}")
    chars = 0
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object")
        role = m.get("role", "user")
        if not isinstance(role, str) or role not in ROLES:
            raise RequestError(f"{where}.role must be one of {sorted(ROLES)}, got {role!r}")
        chars += _content_chars(m.get("content"), where)
        for key in ("name", "tool_call_id"):
            _str(m.get(key), f"{where}.{key}", limits.max_id_chars)
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise RequestError(f"{where}.tool_calls must be a list")
        for j, call in enumerate(calls or []):
            chars += _tool_call_chars(call, f"{where}.tool_calls[{j}]", limits)
    return messages, chars


def _tools(body: dict[str, Any], limits: ServeLimits) -> tuple[list[dict[str, Any]] | None, int]:
    tools = body.get("tools") or None
    if tools is None:
        return None, 0
    if not isinstance(tools, list):
        raise RequestError("tools must be a list")
    if len(tools) > limits.max_tools:
        raise RequestError(f"{len(tools)} tools, over the cap of {limits.max_tools}")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            raise RequestError(f"tools[{i}] must be an object with a 'function' object")
        _str(fn.get("name"), f"tools[{i}].function.name", limits.max_id_chars)
        if not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}].function.name must be a string")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON schema object")
    return tools, len(json.dumps(tools))


def _stop(body: dict[str, Any], cfg: SamplingConfig, limits: ServeLimits) -> list[str]:
    stop = body.get("stop") or list(cfg.stop)
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(x, str) and x for x in stops):
        raise RequestError(f"stop must be a string or a list of non-empty strings, got {stop!r}")
    if len(stops) > limits.max_stop:
        raise RequestError(f"{len(stops)} stop strings, over the cap of {limits.max_stop}")
    return list(stops)


def parse_request(
    body: Any, chat: ChatFormat, cfg: SamplingConfig, limits: ServeLimits | None = None
) -> ChatRequest:
    """Validate `body`; raises RequestError naming the first bad or unsupported field."""
    limits = limits or ServeLimits()
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    for key, value in body.items():
        if key in SUPPORTED:
            continue
        if key in NEUTRAL:
            if value not in NEUTRAL[key]:
                raise RequestError(
                    f"unsupported request field {key!r} (value {value!r:.200}): it would "
                    "change sampling"
                )
            continue
        ignore_field(key)
    messages, chars = _messages(body, limits)
    tools, tool_chars = _tools(body, limits)
    stop = _stop(body, cfg, limits)
    cap = limits.max_completion_tokens
    max_new = _int(body, "max_completion_tokens", 1, cap) or _int(body, "max_tokens", 1, cap)
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = _int(body, "top_k", -1)
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    logprobs, stream = _bool(body, "logprobs"), _bool(body, "stream")
    if top and not logprobs:
        raise RequestError("top_logprobs needs logprobs=true")
    seed = _int(body, "seed", -(2**63), 2**64 - 1)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object")
    if options and not stream:
        raise RequestError("stream_options needs stream=true")
    unknown = set(options) - {"include_usage", "continuous_usage_stats"}
    if unknown:
        raise RequestError(f"unsupported request field 'stream_options.{sorted(unknown)[0]}'")
    include_usage = _bool(options, "include_usage")
    _bool(options, "continuous_usage_stats")
    _bool(body, "parallel_tool_calls")
    params = SamplingParams(
        max_new_tokens=int(max_new or cfg.max_new_tokens),
        temperature=float(cfg.temperature if temperature is None else temperature),
        top_p=float(cfg.top_p if top_p is None else top_p),
        top_k=max(int(cfg.top_k if top_k is None else top_k), 0),
        stop_token_ids=list(chat.stop_token_ids),
        stop=stop,
        seed=seed,
        top_logprobs=top,
    )
    return ChatRequest(
        messages=messages,
        model=_str(body.get("model"), "model", limits.max_id_chars),
        params=params,
        n=_int(body, "n", 1, MAX_N) or 1,
        stream=stream,
        include_usage=include_usage,
        tools=tools,
        tool_choice=_tool_choice(body, tools),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        logprobs=logprobs,
        top_logprobs=top,
        response_format=_response_format(body),
        user=_str(body.get("user"), "user", limits.max_id_chars),
        raw=body,
        text_chars=chars + tool_chars,
        return_token_ids=_bool(body, "return_token_ids"),
    )
