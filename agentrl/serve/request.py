"""One chat-completions request body, checked field by field.

Why: a field we silently ignore is a wrong answer the client cannot see (a `tool_choice` that
does nothing, a `response_format` that is not enforced). Every field is either honoured,
accepted because its value is the neutral default, or rejected with a 400 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import SamplingConfig
from agentrl.engines.base import SamplingParams

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
    "metadata": (None, {}),
    "store": (None, False),
    "service_tier": (None, "auto", "default"),
    "reasoning_effort": (None,),
    "modalities": (None, ["text"]),
    "min_p": (None, 0, 0.0),
    "echo": (None, False),
    "skip_special_tokens": (None, True),
}
MAX_N = 64
MAX_TOP_LOGPROBS = 20


class RequestError(ValueError):
    """A request the server refuses (HTTP 400); the message names the field."""


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

    @property
    def named_tool(self) -> str | None:
        return self.tool_choice.get("name") if isinstance(self.tool_choice, dict) else None


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
        name = (choice.get("function") or {}).get("name")
        if name not in names:
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
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object")
        return {"schema": schema, "name": spec.get("name")}
    raise RequestError(
        f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}"
    )


def parse_request(body: Any, chat: ChatFormat, cfg: SamplingConfig) -> ChatRequest:
    """Validate `body`; raises RequestError naming the first bad or unsupported field."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    for key, value in body.items():
        if key in SUPPORTED:
            continue
        if key in NEUTRAL:
            if value not in NEUTRAL[key]:
                raise RequestError(f"unsupported request field {key!r} (value {value!r})")
            continue
        raise RequestError(f"unsupported request field {key!r}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list")
    tools = body.get("tools") or None
    if tools is not None and not isinstance(tools, list):
        raise RequestError("tools must be a list")
    stop = body.get("stop") or list(cfg.stop)
    if not isinstance(stop, str | list):
        raise RequestError(f"stop must be a string or a list, got {stop!r}")
    max_new = _int(body, "max_completion_tokens", 1) or _int(body, "max_tokens", 1)
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = _int(body, "top_k", -1)
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    if top and not body.get("logprobs"):
        raise RequestError("top_logprobs needs logprobs=true")
    seed = _int(body, "seed", -(2**63))
    options = body.get("stream_options") or {}
    if options and not body.get("stream"):
        raise RequestError("stream_options needs stream=true")
    unknown = set(options) - {"include_usage", "continuous_usage_stats"}
    if unknown:
        raise RequestError(f"unsupported request field 'stream_options.{sorted(unknown)[0]}'")
    params = SamplingParams(
        max_new_tokens=int(max_new or cfg.max_new_tokens),
        temperature=float(cfg.temperature if temperature is None else temperature),
        top_p=float(cfg.top_p if top_p is None else top_p),
        top_k=max(int(cfg.top_k if top_k is None else top_k), 0),
        stop_token_ids=list(chat.stop_token_ids),
        stop=[stop] if isinstance(stop, str) else list(stop),
        seed=seed,
        top_logprobs=top,
    )
    return ChatRequest(
        messages=messages,
        model=body.get("model"),
        params=params,
        n=_int(body, "n", 1, MAX_N) or 1,
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")),
        tools=tools,
        tool_choice=_tool_choice(body, tools),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        logprobs=bool(body.get("logprobs")),
        top_logprobs=top,
        response_format=_response_format(body),
        user=body.get("user"),
        raw=body,
    )
