"""Tool-call parsers: the model's sampled text -> (content, tool calls).

Parsing never raises. A call the model clearly attempted but got wrong (bad JSON, missing
name, unterminated block) comes back as a `ToolCall` with `parse_error` set, so the env can
answer it with an error message the model learns from, instead of the rollout crashing or
silently treating the attempt as a final answer.

Formats:

* `hermes`: Qwen2.5/Qwen3/Hermes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
  any number per message.
* `llama3`: Llama-3.x bare JSON `{"name": ..., "parameters": {...}}`, optionally after
  `<|python_tag|>`, several separated by `;`.
* `qwen3_coder`: Qwen3-Coder / Qwen3.5 XML,
  `<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>`.
  Values are text; given the tool schemas they are cast to the declared types (as vLLM's
  `qwen3_coder` parser does), else a value that is a JSON number/bool/null/array/object is
  decoded and anything else stays a string.
* `mistral`: `[TOOL_CALLS]` followed by a JSON list of calls (v3 tokenizers) or by
  `NAME[ARGS]{...}` (v11+, optionally `NAME[CALL_ID]ID[ARGS]{...}`). Calls without an id get a
  9-character alphanumeric one, the only form Mistral's templates accept back.
* `response_template`: the tokenizer declares a `response_template` (transformers 5): its own
  `parse_response` does the parsing; text it cannot parse falls back to the parser the chat
  template implies.
* `json`: plain-text fallback: any JSON object in the text with a `name` and
  `arguments`/`parameters`.
* `none`: no tool calls; the whole text is content.

`detect_format` picks one from the chat template's text, `auto` in configs.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from agentrl.chat import bounded_json
from agentrl.types import ToolCall

ToolFormat = Literal[
    "hermes", "llama3", "qwen3_coder", "mistral", "response_template", "json", "none"
]
FORMATS: tuple[str, ...] = (
    "hermes", "llama3", "qwen3_coder", "mistral", "response_template", "json", "none"
)  # fmt: skip

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.S)
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.S)
_PYTHON_TAG = "<|python_tag|>"
_RAW_CHARS = 2000  # of the text kept on a call whose parser failed outright


def split_reasoning(text: str) -> tuple[str, str]:
    """Split `<think>...</think>` (Qwen3/R1 style) off the front: (reasoning, rest)."""
    m = _THINK.match(text)
    if not m:
        return "", text
    return m.group(1).strip(), text[m.end() :]


def call_from_obj(obj: Any, raw: str) -> ToolCall:
    """Validate one decoded JSON call; problems become `parse_error`, never exceptions."""
    if not isinstance(obj, dict):
        return ToolCall("", raw=raw, parse_error="tool call is not a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", raw=raw, parse_error='tool call has no "name" string')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models emit arguments as a JSON string
        try:
            args = bounded_json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name, raw=raw, parse_error=f"arguments string is not JSON: {e}")
    if not isinstance(args, dict):
        return ToolCall(name, raw=raw, parse_error="arguments must be a JSON object")
    return ToolCall(name, args, raw=raw)


def _loads_call(raw: str) -> ToolCall:
    try:
        obj = bounded_json.loads(raw)
    except json.JSONDecodeError as e:
        return ToolCall("", raw=raw, parse_error=f"invalid JSON: {e}")
    return call_from_obj(obj, raw)


def parse_hermes(text: str) -> tuple[str, list[ToolCall]]:
    calls: list[ToolCall] = []
    for m in _HERMES.finditer(text):
        raw = m.group(1).strip()
        if not m.group(2):
            calls.append(ToolCall("", raw=raw, parse_error="unterminated <tool_call> block"))
        else:
            calls.append(_loads_call(raw))
    content = _HERMES.sub("", text).strip() if calls else text.strip()
    return content, calls


def _json_objects(text: str, start: int = 0) -> list[tuple[int, int, Any]]:
    """Every top-level JSON object in `text`: (start, end, value); an object nested past the
    bound is (start, where it crossed it, the `TooDeep` error)."""
    found: list[tuple[int, int, Any]] = []
    i = text.find("{", start)
    while i != -1:
        try:
            obj, end = bounded_json.raw_decode(text, i)
        except bounded_json.TooDeep as e:
            found.append((i, e.pos, e))
            i = text.find("{", e.pos + 1)  # past the stretch: rescanning it would be quadratic
            continue
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append((i, end, obj))
        i = text.find("{", end)
    return found


def parse_llama3(text: str) -> tuple[str, list[ToolCall]]:
    body = text.strip()
    tagged = body.startswith(_PYTHON_TAG)
    if tagged:
        body = body[len(_PYTHON_TAG) :].strip()
    if not body.startswith("{"):
        if tagged:  # the model announced a call and then wrote something else
            return "", [ToolCall("", raw=body, parse_error="no JSON object after <|python_tag|>")]
        return text.strip(), []
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(body):
        try:
            obj, end = bounded_json.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            if calls or tagged or '"name"' in body:
                calls.append(ToolCall("", raw=body[pos:], parse_error=f"invalid JSON: {e}"))
                return "", calls
            return text.strip(), []
        calls.append(call_from_obj(obj, body[pos:end]))
        pos = end
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
    if not tagged and len(calls) == 1 and calls[0].parse_error and '"name"' not in body:
        return text.strip(), []  # a plain JSON answer, not a call
    return "", calls


def parse_json(text: str) -> tuple[str, list[ToolCall]]:
    """Fallback: JSON objects anywhere in the text that look like calls."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    at = 0
    for start, end, obj in _json_objects(text):
        if isinstance(obj, bounded_json.TooDeep):
            if '"name"' in text[start:end]:  # an attempted call, too deep to decode
                raw = text[start : start + _RAW_CHARS]
                calls.append(ToolCall("", raw=raw, parse_error=f"invalid JSON: {obj}"))
        elif (
            isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj)
        ):
            calls.append(call_from_obj(obj, text[start:end]))
            kept.append(text[at:start])
            at = end
    kept.append(text[at:])
    return "".join(kept).strip(), calls


_XML_FUNCTION = re.compile(r"^\s*<function=([^>\n]*)>(.*?)(</function>\s*$|\Z)", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?(</parameter>|(?=<parameter=)|\Z)", re.S)


def parse_qwen3_coder(
    text: str, tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[ToolCall]]:
    calls: list[ToolCall] = []
    for m in _HERMES.finditer(text):
        raw, closed = m.group(1).strip(), bool(m.group(2))
        fm = _XML_FUNCTION.match(raw)
        if fm is None:  # hermes JSON inside <tool_call> (some checkpoints mix the two)
            calls.append(
                _loads_call(raw)
                if raw.startswith("{") and closed
                else ToolCall("", raw=raw, parse_error="no <function=NAME> in <tool_call>")
            )
            continue
        name, body = fm.group(1).strip(), fm.group(2)
        if not name:
            calls.append(ToolCall("", raw=raw, parse_error="empty function name"))
        elif not closed or not fm.group(3):
            calls.append(ToolCall(name, raw=raw, parse_error="unterminated <tool_call> block"))
        else:
            calls.append(_xml_call(name, body, raw, _properties(tools, name)))
    content = _HERMES.sub("", text).strip() if calls else text.strip()
    return content, calls


def _xml_call(name: str, body: str, raw: str, props: dict[str, Any]) -> ToolCall:
    args: dict[str, Any] = {}
    for pm in _XML_PARAM.finditer(body):
        key = pm.group(1).strip()
        if pm.group(3) != "</parameter>":
            return ToolCall(name, raw=raw, parse_error=f"parameter {key!r} is not closed")
        args[key] = _cast(pm.group(2), props.get(key))
    return ToolCall(name, args, raw=raw)


def _properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for t in tools or []:
        fn = t.get("function", t)
        if fn.get("name") == name:
            return (fn.get("parameters") or {}).get("properties") or {}
    return {}


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    declared = schema.get("type")
    out = [declared] if isinstance(declared, str) else list(declared or [])
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            out += _types(sub)
    if "enum" in schema and not out:
        out = sorted({type(v).__name__ for v in schema["enum"]})
    return out


def _cast(raw: str, schema: Any) -> Any:
    """A parameter's text as the value its schema declares (else: JSON if it is JSON)."""
    types = _types(schema)
    if "string" in types or "str" in types:
        if not ({"null"} & set(types) and raw.strip() in ("null", "None")):
            return raw
    try:
        value = bounded_json.loads(raw)
    except json.JSONDecodeError:
        lowered = raw.strip()
        if "boolean" in types and lowered in ("True", "False"):  # jinja's `true | string`
            return lowered == "True"
        if "null" in types and lowered == "None":
            return None
        return raw
    if types and isinstance(value, str):
        return raw
    return value


_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\s*([^\[\]\s{]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9]+)\s*)?\[ARGS\]", re.S)


def _mistral_id(raw: str, i: int) -> str:
    return hashlib.sha1(f"{i}:{raw}".encode()).hexdigest()[:9]


def parse_mistral(text: str) -> tuple[str, list[ToolCall]]:
    head, sep, rest = text.partition(_MISTRAL)
    if not sep:
        return text.strip(), []
    calls: list[ToolCall] = []
    for chunk in rest.split(_MISTRAL):
        body = chunk.strip()
        if body.startswith("["):  # v3: a JSON list of {"name", "arguments"[, "id"]}
            try:
                items, _ = bounded_json.raw_decode(body)
            except json.JSONDecodeError as e:
                calls.append(ToolCall("", raw=body, parse_error=f"invalid JSON: {e}"))
                continue
            if not isinstance(items, list):
                items = [items]
            for obj in items:
                call = call_from_obj(obj, json.dumps(obj))
                if isinstance(obj, dict) and isinstance(obj.get("id"), str):
                    call.id = obj["id"]
                calls.append(call)
            continue
        pos = 0
        while pos < len(body):  # v11+: NAME[ARGS]{...}, possibly several
            m = _MISTRAL_ARGS.match(body, pos)
            if not m:
                calls.append(ToolCall("", raw=body[pos:], parse_error="expected NAME[ARGS]{...}"))
                break
            try:
                args, end = bounded_json.raw_decode(body, m.end())
            except json.JSONDecodeError as e:
                calls.append(ToolCall(m.group(1), raw=body[pos:], parse_error=f"invalid JSON: {e}"))
                break
            call = call_from_obj({"name": m.group(1), "arguments": args}, body[pos:end])
            call.id = m.group(2) or ""
            calls.append(call)
            pos = end
            while pos < len(body) and body[pos].isspace():
                pos += 1
    for i, c in enumerate(calls):
        c.id = c.id or _mistral_id(c.raw, i)
    return head.strip(), calls


def parse_response_template(
    text: str, template: dict[str, Any], tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[ToolCall]] | None:
    """transformers' `parse_response` driven by the tokenizer's `response_template`;
    None when it cannot parse the text."""
    from transformers.utils.chat_parsing import parse_response

    try:
        schemas: list[Any] | None = tools or None  # its parameter type is an invariant list
        message = parse_response(text, template, prefix="", tools=schemas)
    except Exception:  # noqa: BLE001 - the caller falls back to the template's own format
        return None
    calls = []
    for raw in message.get("tool_calls") or []:
        fn = raw.get("function", raw) if isinstance(raw, dict) else raw
        call = call_from_obj(fn, json.dumps(fn, default=str))
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            call.id = raw["id"]
        calls.append(call)
    content = message.get("content")
    return (content.strip() if isinstance(content, str) else ""), calls


def parse(
    text: str,
    format: str = "hermes",
    tools: list[dict[str, Any]] | None = None,
    response_template: dict[str, Any] | None = None,
    fallback: str = "hermes",
) -> tuple[str, list[ToolCall]]:
    """Split sampled text into (content, tool calls). Unknown formats raise ValueError.

    `tools` (the schemas the prompt showed) let formats whose arguments are text cast them;
    `response_template`/`fallback` serve the `response_template` format (without a template,
    or on text it cannot parse, `fallback` parses).

    Never raises on `text`: a parser that fails outright (a bug, a malformed tool schema)
    gives the whole text as content plus one call whose `parse_error` says so."""
    for fmt in (format, fallback) if format == "response_template" else (format,):
        if fmt not in FORMATS:
            raise ValueError(f"unknown tool format {fmt!r}; known: {', '.join(FORMATS)}")
    try:
        return _parse(text, format, tools, response_template, fallback)
    except Exception as e:  # noqa: BLE001 - model output must never crash the rollout
        error = f"tool-call parser {format!r} failed: {type(e).__name__}: {str(e)[:200]}"
        return text.strip(), [ToolCall("", raw=text[:_RAW_CHARS], parse_error=error)]


def _parse(
    text: str,
    format: str,
    tools: list[dict[str, Any]] | None,
    response_template: dict[str, Any] | None,
    fallback: str,
) -> tuple[str, list[ToolCall]]:
    if format == "response_template":
        parsed = None
        if response_template is not None:
            parsed = parse_response_template(text, response_template, tools)
        return parsed if parsed is not None else _parse(text, fallback, tools, None, fallback)
    if format == "qwen3_coder":
        return parse_qwen3_coder(text, tools)
    if format == "mistral":
        return parse_mistral(text)
    if format == "hermes":
        return parse_hermes(text)
    if format == "llama3":
        return parse_llama3(text)
    if format == "json":
        return parse_json(text)
    if format == "none":
        return text.strip(), []
    raise ValueError(f"unknown tool format {format!r}; known: {', '.join(FORMATS)}")


def detect_format(chat_template: str | None) -> str:
    """Pick the parser a chat template implies (`auto`)."""
    tpl = chat_template or ""
    if _MISTRAL in tpl:
        return "mistral"
    if "<function=" in tpl and "<parameter=" in tpl:
        return "qwen3_coder"
    if "<tool_call>" in tpl:
        return "hermes"
    if "<|python_tag|>" in tpl or ("<|start_header_id|>" in tpl and "parameters" in tpl):
        return "llama3"
    return "json"
