"""Tools: typed Python functions the model can call.

A tool is declared with `@tool`. Its OpenAI function schema comes from the type hints and the
Google-style docstring via `transformers.utils.get_json_schema` (the same schema HF chat
templates are written for), so what the model is told always matches what the code accepts.
Arguments are validated against that schema *before* the call; the call runs with a timeout;
exceptions, timeouts and oversized outputs become an error `ToolResult` the model sees, so a
bad call never ends the episode. The one exception that passes through is
`agentrl.types.InfraError` (a sandbox that cannot start, a tool's service down): that is the
machine's failure, not the model's, and ends the episode as one (never trained on).

A return value reaches the model as text: a str as is, a dict/list/tuple as JSON, None as
`NO_RESULT` (so a forgotten `return` reads as "nothing", not the string "None").

Stateful tools subclass `ToolSet`; its `@tool` methods share per-episode state that `reset()`
clears. Plain functions are grouped with `ToolSet.of(fn, ...)`.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import enum
import functools
import inspect
import json
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from agentrl.tools.workers import in_daemon_thread
from agentrl.types import InfraError, ToolCall, ToolResult

NO_RESULT = "(the tool returned nothing)"


def _documented(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, or a stand-in whose docstring names every argument: transformers requires a
    description per argument, agentrl lets one be left out (the schema then has none)."""
    from transformers.utils.chat_template_utils import parse_google_format_docstring

    doc = inspect.getdoc(fn)
    if not doc:
        raise TypeError(
            f"tool {getattr(fn, '__name__', fn)!r} needs a docstring: the model reads it"
        )
    summary, arg_docs, returns = parse_google_format_docstring(doc.strip())
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    missing = [p for p in params if p not in (arg_docs or {})]
    if not missing:
        return fn
    arg_docs = {**(arg_docs or {}), **{p: _UNDOCUMENTED for p in missing}}
    lines = [summary or "", "", "Args:", *(f"    {p}: {arg_docs[p]}" for p in params)]
    if returns:
        lines += ["", "Returns:", f"    {returns}"]

    @functools.wraps(fn)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    stand_in.__doc__ = "\n".join(lines)
    return stand_in


_UNDOCUMENTED = "\x00undocumented"


def build_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """OpenAI function schema for `fn`, built by `transformers.utils.get_json_schema` from its
    type hints and Google-style docstring (Enum and Literal as `enum`, `Optional[X]` as
    `nullable`, `(choices: [...])` at the end of an argument's description), so what the model
    is told matches what chat templates render for HF tools. agentrl adds `default`s and
    `additionalProperties: false`; jsonschema checks every call against it (`validation_schema`).
    """
    # transformers (2-3 s to import) only when a tool is built, not for `agentrl config show`
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import (
        DocstringParsingException,
        TypeHintParsingException,
    )

    try:
        schema = get_json_schema(_documented(fn))
    except (TypeHintParsingException, DocstringParsingException) as e:
        raise TypeError(f"tool {getattr(fn, '__name__', fn)!r}: {e}") from None
    function = schema["function"]
    function.pop("return", None)  # the model never writes it; templates ignore it
    function["name"] = name or fn.__name__
    params = function["parameters"]
    params.setdefault("required", [])
    for pname, p in inspect.signature(fn).parameters.items():
        prop = params["properties"].get(pname)
        if prop is None:
            continue
        if prop.get("description") == _UNDOCUMENTED:
            del prop["description"]
        default = p.default.value if isinstance(p.default, enum.Enum) else p.default
        if default is not inspect.Parameter.empty:
            prop["default"] = default
    params["additionalProperties"] = False
    return {"type": "function", "function": function}


def validation_schema(schema: Any) -> Any:
    """The JSON Schema a call's arguments are checked against: OpenAPI's `nullable: true`
    (which chat templates and transformers use) becomes "or null", which jsonschema knows."""
    if isinstance(schema, list):
        return [validation_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: validation_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") is True:
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _enum_converters(fn: Callable[..., Any]) -> dict[str, Callable[[Any], Any]]:
    """Arguments typed as an Enum arrive as their JSON values; the tool gets the member."""
    out: dict[str, Callable[[Any], Any]] = {}
    for pname, hint in typing.get_type_hints(fn).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            out[pname] = functools.partial(_to_enum, hint)
        elif typing.get_origin(hint) is list:
            (item,) = typing.get_args(hint) or (None,)
            if isinstance(item, type) and issubclass(item, enum.Enum):
                out[pname] = functools.partial(_to_enums, item)
    return out


class ToolError(Exception):
    """Raised by a tool to report a failure whose message the model sees as is (other
    exceptions are shown as `Type: message`)."""


@dataclass
class ToolSpec:
    """A callable plus the schema derived from it."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    timeout_s: float
    max_output_chars: int
    # per-argument conversions from JSON values to what `fn` is typed to take (Enum members)
    converters: dict[str, Callable[[Any], Any]] = field(default_factory=dict)

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    @functools.cached_property
    def validator(self) -> jsonschema.protocols.Validator:
        """Built once: `jsonschema.validate` re-checks the schema itself on every call."""
        schema = validation_schema(self.parameters)
        return jsonschema.validators.validator_for(schema)(schema)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    timeout_s: float = 10.0,
    max_output_chars: int = 8192,
) -> Any:
    """Declare a tool. Usable bare (`@tool`) or with options (`@tool(timeout_s=5)`)."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__agentrl_tool__ = {  # type: ignore[attr-defined]
            "name": name or f.__name__,
            "timeout_s": timeout_s,
            "max_output_chars": max_output_chars,
        }
        return f

    return wrap(fn) if fn is not None else wrap


_Built = tuple[dict[str, Any], dict[str, Callable[[Any], Any]]]
_SCHEMAS: dict[tuple[Any, str], _Built] = {}


def _build(fn: Callable[..., Any], name: str) -> _Built:
    return build_schema(fn, name), _enum_converters(fn)


def _cached_schema(fn: Callable[..., Any], name: str) -> _Built:
    """Every episode builds its env's ToolSet: read each function's hints and docstring once.
    Bound methods share their function's entry (built from the bound method, so its first
    parameter is left out whatever it is called); unhashable callables are built each time."""
    key = (getattr(fn, "__func__", fn), name)
    try:
        hit = _SCHEMAS.get(key)
    except TypeError:
        return _build(fn, name)
    if hit is None:
        if len(_SCHEMAS) >= 4096:  # per-episode closures must not grow it without bound
            _SCHEMAS.clear()
        hit = _SCHEMAS[key] = _build(fn, name)
    return hit


def _spec_for(fn: Callable[..., Any]) -> ToolSpec:
    meta = getattr(fn, "__agentrl_tool__", None) or {
        "name": fn.__name__,
        "timeout_s": 10.0,
        "max_output_chars": 8192,
    }
    schema, converters = _cached_schema(fn, meta["name"])
    return ToolSpec(
        name=meta["name"],
        fn=fn,
        schema=copy.deepcopy(schema),
        timeout_s=meta["timeout_s"],
        max_output_chars=meta["max_output_chars"],
        converters=converters,
    )


class ToolSet:
    """A group of tools sharing per-episode state.

    Subclass and decorate methods with `@tool`; override `reset()` to clear state between
    episodes and `close()` to release resources. `ToolSet.of(f, g)` wraps plain functions.
    """

    def __init__(self, *functions: Callable[..., Any]) -> None:
        methods = [
            getattr(self, n)
            for n in dir(type(self))
            if hasattr(getattr(type(self), n, None), "__agentrl_tool__")
        ]
        self._specs: dict[str, ToolSpec] = {}
        for f in [*methods, *functions]:
            spec = _spec_for(f)
            if spec.name in self._specs:
                raise ValueError(f"duplicate tool name {spec.name!r}")
            self._specs[spec.name] = spec

    @classmethod
    def of(cls, *functions: Callable[..., Any]) -> ToolSet:
        return cls(*functions)

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [s.schema for s in self._specs.values()]

    def spec(self, name: str) -> ToolSpec:
        return self._specs[name]

    def reset(self) -> None:
        """Clear per-episode state. Stateless tool sets need nothing."""

    def close(self) -> None:
        """Release resources (processes, sandboxes)."""

    def _error(self, call: ToolCall, msg: str, t0: float) -> ToolResult:
        return ToolResult(call.id, call.name, f"Error: {msg}", True, False, time.monotonic() - t0)

    def _check(self, call: ToolCall) -> str | None:
        if call.parse_error:
            return f"could not parse tool call: {call.parse_error}"
        if call.name not in self._specs:
            return f"unknown tool {call.name!r}; available: {', '.join(self.names)}"
        try:
            self._specs[call.name].validator.validate(call.arguments)
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path) or "arguments"
            return f"invalid arguments for {call.name!r} ({path}): {e.message}"
        return None

    def _result(self, call: ToolCall, value: Any, t0: float) -> ToolResult:
        spec = self._specs[call.name]
        text = result_text(value)
        truncated = len(text) > spec.max_output_chars
        if truncated:
            text = text[: spec.max_output_chars] + f"\n... [truncated {len(text)} chars]"
        return ToolResult(call.id, call.name, text, False, truncated, time.monotonic() - t0)

    async def acall(self, call: ToolCall) -> ToolResult:
        """Run one call with validation and timeout; never raises for tool failures.

        Sync tools run in a worker thread so a slow tool never blocks the event loop. A sync
        tool that ignores its timeout keeps its thread, but the episode moves on.
        """
        t0 = time.monotonic()
        problem = self._check(call)
        if problem:  # the call itself is invalid: `rollout.max_invalid_tool_calls` counts it
            return dataclasses.replace(self._error(call, problem, t0), invalid=True)
        spec = self._specs[call.name]
        try:
            kwargs = {k: spec.converters.get(k, _same)(v) for k, v in call.arguments.items()}
            if inspect.iscoroutinefunction(spec.fn):
                coro = spec.fn(**kwargs)
            else:
                coro = in_daemon_thread(spec.fn, **kwargs)
            value = await asyncio.wait_for(coro, timeout=spec.timeout_s)
        except asyncio.TimeoutError:
            return self._error(call, f"tool {call.name!r} timed out after {spec.timeout_s}s", t0)
        except ToolError as e:  # the tool's own message, meant for the model
            return self._error(call, str(e), t0)
        except InfraError:  # the machine failed, not the call: ends the episode as such
            raise
        except Exception as e:  # noqa: BLE001 - any tool failure is shown to the model
            return self._error(call, f"{type(e).__name__}: {e}", t0)
        return self._result(call, value, t0)

    def call(self, call: ToolCall) -> ToolResult:
        """Synchronous `acall` for sync envs and tests."""
        return run_sync(self.acall(call))


def result_text(value: Any) -> str:
    """What the model reads for a tool's return value: a str as is, a dict/list/tuple as JSON
    (not Python repr), None (a forgotten `return`) as a plain note, anything else as repr."""
    if value is None:
        return NO_RESULT
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value if isinstance(value, str) else repr(value)


def _same(value: Any) -> Any:
    return value


def _to_enum(e: type[enum.Enum], v: Any) -> Any:
    return v if v is None else e(v)


def _to_enums(e: type[enum.Enum], v: Any) -> Any:
    return v if v is None else [e(x) for x in v]


def run_sync(coro: Any) -> Any:
    """Run `coro` to completion from sync code, also when called inside a running loop (then
    on a fresh loop in a worker thread): the sync `Env.step` of an async env."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside a running loop (a sync env stepped in a thread is fine; this is not):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
