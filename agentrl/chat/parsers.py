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
* `json`: plain-text fallback: any JSON object in the text with a `name` and
  `arguments`/`parameters`.
* `none`: no tool calls; the whole text is content.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from agentrl.types import ToolCall

ToolFormat = Literal["hermes", "llama3", "json", "none"]
FORMATS: tuple[str, ...] = ("hermes", "llama3", "json", "none")

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.S)
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.S)
_PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


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
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name, raw=raw, parse_error=f"arguments string is not JSON: {e}")
    if not isinstance(args, dict):
        return ToolCall(name, raw=raw, parse_error="arguments must be a JSON object")
    return ToolCall(name, args, raw=raw)


def _loads_call(raw: str) -> ToolCall:
    try:
        obj = json.loads(raw)
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
    """Every top-level JSON object in `text`: (start, end, value)."""
    found: list[tuple[int, int, Any]] = []
    i = text.find("{", start)
    while i != -1:
        try:
            obj, end = _DECODER.raw_decode(text, i)
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
            obj, end = _DECODER.raw_decode(body, pos)
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
    spans: list[tuple[int, int]] = []
    for start, end, obj in _json_objects(text):
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            calls.append(call_from_obj(obj, text[start:end]))
            spans.append((start, end))
    content = text
    for start, end in reversed(spans):
        content = content[:start] + content[end:]
    return content.strip(), calls


def parse(text: str, format: str = "hermes") -> tuple[str, list[ToolCall]]:
    """Split sampled text into (content, tool calls). Unknown formats raise ValueError."""
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
    if "<tool_call>" in tpl:
        return "hermes"
    if "<|python_tag|>" in tpl or ("<|start_header_id|>" in tpl and "parameters" in tpl):
        return "llama3"
    return "json"
