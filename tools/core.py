"""Tools: typed Python functions the model can call.

A tool is declared with `@tool`. Its OpenAI function schema comes from the type hints and the
Google-style docstring, so what the model is told always matches what the code accepts.
Arguments are validated against that schema *before* the call; the call runs with a timeout;
exceptions, timeouts and oversized outputs become an error `ToolResult` the model sees, so a
bad call never ends the episode.

Stateful tools subclass `ToolSet`; its `@tool` methods share per-episode state that `reset()`
clears. Plain functions are grouped with `ToolSet.of(fn, ...)`.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import re
import threading
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema

from agentrl.types import ToolCall, ToolResult

_PY_TO_JSON: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
}


def _json_type(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in _PY_TO_JSON:
        return {"type": _PY_TO_JSON[tp]}
    if origin is Literal:
        return {"type": _PY_TO_JSON[type(args[0])], "enum": list(args)}
    if origin in (list, tuple) or tp in (list, tuple):
        item = _json_type(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _json_type(non_none[0])
        return {"anyOf": [_json_type(a) for a in non_none]}
    raise TypeError(f"unsupported tool argument type: {tp!r}")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary, {arg: description})."""
    doc = inspect.cleandoc(doc or "")
    summary = doc.split("\n\n")[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    m = re.search(r"^Args:\s*\n(.*?)(?:\n\S|\Z)", doc, re.S | re.M)
    if m:
        current = None
        for line in m.group(1).splitlines():
            hit = re.match(r"\s+(\w+)(?:\s*\(.*?\))?:\s*(.*)", line)
            if hit and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = hit.group(1)
                args[current] = hit.group(2).strip()
            elif current and line.strip():
                args[current] += " " + line.strip()
    return summary, args


@dataclass
class ToolSpec:
    """A callable plus the schema derived from it."""

    name: str
    fn: Callable[..., Any]
    schema: dict[str, Any]
    timeout_s: float
    max_output_chars: int

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    @functools.cached_property
    def validator(self) -> jsonschema.protocols.Validator:
        """Built once: `jsonschema.validate` re-checks the schema itself on every call."""
        cls = jsonschema.validators.validator_for(self.parameters)
        return cls(self.parameters)


def build_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """OpenAI function schema for `fn` from its signature and docstring."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    if not summary:
        raise TypeError(f"tool {fn.__name__!r} needs a docstring: the model reads it")
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, p in sig.parameters.items():
        if pname == "self":
            continue
        if pname not in hints:
            raise TypeError(f"tool {fn.__name__!r}: argument {pname!r} needs a type hint")
        prop = _json_type(hints[pname])
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        if p.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            prop["default"] = p.default
        props[pname] = prop
    params = {"type": "object", "properties": props, "required": required}
    params["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": name or fn.__name__, "description": summary, "parameters": params},
    }


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


_SCHEMAS: dict[tuple[Any, str], dict[str, Any]] = {}


def _cached_schema(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    """Every episode builds its env's ToolSet: read each function's hints and docstring once.
    Bound methods share their function's entry (built from the bound method, so its first
    parameter is left out whatever it is called); unhashable callables are built each time."""
    key = (getattr(fn, "__func__", fn), name)
    try:
        hit = _SCHEMAS.get(key)
    except TypeError:
        return build_schema(fn, name)
    if hit is None:
        if len(_SCHEMAS) >= 4096:  # per-episode closures must not grow it without bound
            _SCHEMAS.clear()
        hit = _SCHEMAS[key] = build_schema(fn, name)
    return hit


def _spec_for(fn: Callable[..., Any]) -> ToolSpec:
    meta = getattr(fn, "__agentrl_tool__", None) or {
        "name": fn.__name__,
        "timeout_s": 10.0,
        "max_output_chars": 8192,
    }
    return ToolSpec(
        name=meta["name"],
        fn=fn,
        schema=copy.deepcopy(_cached_schema(fn, meta["name"])),
        timeout_s=meta["timeout_s"],
        max_output_chars=meta["max_output_chars"],
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
        text = value if isinstance(value, str) else repr(value)
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
        if problem:
            return self._error(call, problem, t0)
        spec = self._specs[call.name]
        try:
            if inspect.iscoroutinefunction(spec.fn):
                coro = spec.fn(**call.arguments)
            else:
                coro = _in_daemon_thread(spec.fn, call.arguments)
            value = await asyncio.wait_for(coro, timeout=spec.timeout_s)
        except asyncio.TimeoutError:
            return self._error(call, f"tool {call.name!r} timed out after {spec.timeout_s}s", t0)
        except Exception as e:  # noqa: BLE001 - any tool failure is shown to the model
            return self._error(call, f"{type(e).__name__}: {e}", t0)
        return self._result(call, value, t0)

    def call(self, call: ToolCall) -> ToolResult:
        """Synchronous `acall` for sync envs and tests."""
        return _run_sync(self.acall(call))


def _in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
    """Run a sync tool in a daemon thread: a tool that hangs past its timeout can neither block
    the event loop nor keep the interpreter from exiting (asyncio.to_thread would do both)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            (fut.set_result if ok else fut.set_exception)(value)

    def target() -> None:
        try:
            value, ok = fn(**kwargs), True
        except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
            value, ok = e, False
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # loop closed after a timeout: nobody is waiting any more
            pass

    threading.Thread(target=target, daemon=True, name=f"tool-{fn.__name__}").start()
    return fut


def _run_sync(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside a running loop (a sync env stepped in a thread is fine; this is not):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
