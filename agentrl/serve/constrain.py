"""Constrained decoding for `agentrl serve`: `response_format` and `tool_choice` as grammars.

Why a grammar and not post-hoc rewriting: the trajectory must hold the tokens the model
actually sampled. A JSON answer or a forced tool call is therefore produced *by sampling
under a logits mask* (the engine's `TokenConstraint` hook), in the model's own tool-call
syntax (`<tool_call>{...}</tool_call>` for hermes), so the recorded ids re-render exactly as
the template would and the next turn's prompt is what the model would have seen anyway.

Grammars are compiled by llguidance (the Rust engine behind vLLM's "guidance" backend; it
runs on CPU and reads our HF fast tokenizers). After the grammar accepts, only the chat's
stop tokens may follow, so a constrained turn ends like any other.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import torch

from agentrl.chat.format import ChatFormat
from agentrl.engines.base import TokenConstraint
from agentrl.serve._ll_vocab import VocabMismatch, ll_tokenizer
from agentrl.serve.request import ChatRequest, RequestError

# Tool-call syntax per tool format: (text before a call, text after it, arguments key, text
# between parallel calls). Formats missing here cannot force a call (a 400 says so).
# Whitespace is bounded everywhere: a small model left free to pad whitespace may never stop.
CALL_SYNTAX: dict[str, tuple[str, str, str, str]] = {
    "hermes": ("<tool_call>", "</tool_call>", "arguments", r"/\n?/"),
    "json": ("", "", "arguments", r"/\n?/"),
    "llama3": ("", "", "parameters", r"/; ?/"),
}
# JSON as `json.dumps` (and so the templates' `tojson`) writes it, no free whitespace.
JSON_STYLE = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
# Text that starts a call, forbidden with tool_choice="none".
CALL_MARKERS: dict[str, str] = {"hermes": "<tool_call>", "llama3": "<|python_tag|>"}
_TOKENIZERS: dict[int, tuple[Any, Any]] = {}


def _llguidance(field: str) -> Any:
    try:
        import llguidance
        import llguidance.hf
    except ImportError as e:
        raise RequestError(
            f"{field} needs constrained decoding: pip install 'agentrl[serve]' ({e})"
        ) from e
    return llguidance


def _ll_tokenizer(chat: ChatFormat) -> Any:
    """llguidance's view of the tokenizer, checked against it (`_ll_vocab`; about a second to
    build; cached per tokenizer)."""
    key = id(chat.tokenizer)
    if key not in _TOKENIZERS:
        try:
            ll = ll_tokenizer(chat.tokenizer, chat.end_of_turn_id)
        except VocabMismatch as e:
            raise RequestError(f"constrained decoding: {e}") from e
        _TOKENIZERS[key] = (chat.tokenizer, ll)
    return _TOKENIZERS[key][1]


def _lit(chat: ChatFormat, text: str) -> str:
    """A Lark literal for `text`; a special token (`<tool_call>` in many vocabularies) must
    be named by id, since llguidance never matches special tokens against text."""
    ids = chat.encode(text)
    if len(ids) == 1 and ids[0] in set(chat.tokenizer.all_special_ids):
        return f"<[{ids[0]}]>"
    return json.dumps(text)


def call_schema(tool: dict[str, Any], args_key: str) -> dict[str, Any]:
    """JSON schema of one call object `{"name": <const>, "<args_key>": <parameters>}`."""
    fn = tool.get("function") or {}
    params = fn.get("parameters") or {"type": "object"}
    return {
        "type": "object",
        "properties": {"name": {"const": fn.get("name")}, args_key: params},
        "required": ["name", args_key],
        "additionalProperties": False,
    }


def tool_call_grammar(
    chat: ChatFormat, tools: list[dict[str, Any]], parallel: bool, rule: str = "start"
) -> str:
    """Lark grammar: one call (or several, if `parallel`) of `tools` in the chat's syntax,
    as the rule `rule` (`start`: the whole turn; another name: a part of a larger grammar)."""
    fmt = chat.tool_format
    if fmt not in CALL_SYNTAX:
        raise RequestError(
            f"tool_choice cannot force a call in tool format {fmt!r} (supported: "
            f"{', '.join(CALL_SYNTAX)})"
        )
    open_, close, args_key, sep = CALL_SYNTAX[fmt]
    schemas = [call_schema(t, args_key) for t in tools]
    body = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    parts = [
        _lit(chat, open_) + " NL" if open_ else "",
        "body",
        "NL " + _lit(chat, close) if close else "",
    ]
    call = " ".join(p for p in parts if p)
    more = " (SEP call)*" if parallel else ""
    body = styled(body)
    return f"{rule}: call{more}\ncall: {call}\nbody: %json {json.dumps(body)}\nSEP: {sep}\nNL: /\\n?/\n"


def styled(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `JSON_STYLE` unless it sets its own llguidance options."""
    return schema if "x-guidance" in schema else {**schema, "x-guidance": JSON_STYLE}


def no_call_grammar(chat: ChatFormat) -> str | None:
    """Any text that does not start a tool call (None: the format has no marker to ban)."""
    marker = CALL_MARKERS.get(chat.tool_format)
    if marker is None:
        return None
    banned = re.escape(marker).replace("/", "\\/")
    return f"start: TEXT\nTEXT: /(?s:.*)/ & ~/(?s:.*{banned}.*)/\n"


def answer_or_call(req: ChatRequest, chat: ChatFormat) -> bool:
    """Whether a `response_format` request may still call its tools (`tool_choice` auto, in a
    tool format whose calls start with a marker): the turn is then a call or the JSON answer,
    as OpenAI's API has it (the format binds text answers). Without a marker a JSON answer and
    a call look alike (the `json` format parses one out of the other), so the answer is all."""
    return (
        req.response_format is not None
        and req.tool_choice == "auto"
        and bool(req.tools)
        and bool(CALL_SYNTAX.get(chat.tool_format, ("",))[0])
    )


def request_grammar(req: ChatRequest, chat: ChatFormat) -> str | None:
    """The grammar a request's `response_format` / `tool_choice` implies (None: free).

    A forced call (`required`, a named function) wins over `response_format`: the format binds
    the text of an answer, and a forced turn answers with a call (OpenAI's API accepts both;
    a harness with structured output and `tool_choice="required"` sends both)."""
    if req.forced_call:
        _llguidance("tool_choice")
        tools = req.tools or []
        if req.named_tool is not None:
            tools = [t for t in tools if (t.get("function") or {}).get("name") == req.named_tool]
        return tool_call_grammar(chat, tools, req.parallel_tool_calls and not req.named_tool)
    if req.response_format is not None:
        llguidance = _llguidance("response_format")
        schema = styled(req.response_format["schema"])
        if answer_or_call(req, chat):
            calls = tool_call_grammar(chat, req.tools or [], req.parallel_tool_calls, "calls")
            return f"start: calls | answer\nanswer: %json {json.dumps(schema)}\n{calls}"
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(schema)
        except Exception as e:  # noqa: BLE001 - an unsupported or invalid schema
            raise RequestError(f"response_format.json_schema.schema: {e}") from e
    if req.tool_choice == "none" and req.tools:  # without llguidance: calls stay unparsed text
        return no_call_grammar(chat) if importlib.util.find_spec("llguidance") else None
    return None


def check_grammar(grammar: str, chat: ChatFormat, field: str) -> None:
    """Compile once up front so a bad schema is a 400, not a failed generation."""
    import llguidance

    matcher = llguidance.LLMatcher(_ll_tokenizer(chat), grammar, log_level=0)
    if matcher.is_error():
        raise RequestError(f"{field}: {matcher.get_error()}")


class GrammarConstraint(TokenConstraint):
    """A request's grammar as the engine's logits mask; stop tokens once it accepts.

    Text the grammar fixes next (a forced call's `<tool_call>{"name": ..., "arguments":
    {"key": "`) is offered only as tokens that hold all of it, where the vocabulary has
    any: a mask of every token consistent with it would let the model spell it in pieces no
    tokenizer writes. SmolLM2, wanting a number after `"expression":`, took a lone space
    (the fixed text was ` "`), then had to open the string with some token starting with a
    quote and picked `")` (log-prob -15.7): five of six forced calls began with `)`. Offered
    ` "` and its longer kin only, it writes the digits it meant."""

    def __init__(self, grammar: str, chat: ChatFormat) -> None:
        import llguidance

        self.tokenizer = _ll_tokenizer(chat)
        self.matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise RequestError(f"grammar: {self.matcher.get_error()}")
        self.stop_ids = [int(i) for i in chat.stop_token_ids]

    def allowed(self) -> torch.Tensor:
        if self.matcher.is_error():
            raise RuntimeError(f"grammar: {self.matcher.get_error()}")
        if self.matcher.is_stopped():
            mask = torch.zeros(max(self.stop_ids) + 1, dtype=torch.bool)
        else:
            bias = self.matcher.compute_logit_bias()
            mask = torch.frombuffer(bytearray(bias), dtype=torch.uint8) > 0
            if fixed := self.matcher.compute_ff_bytes():
                mask = self._whole(mask, bytes(fixed))
        if self.matcher.is_accepting() or self.matcher.is_stopped():
            if mask.shape[0] <= max(self.stop_ids):
                mask = torch.cat([mask, mask.new_zeros(max(self.stop_ids) + 1 - mask.shape[0])])
            mask[self.stop_ids] = True
        return mask

    def _whole(self, mask: torch.Tensor, fixed: bytes) -> torch.Tensor:
        """`mask` less the tokens that hold only part of the `fixed` next bytes, unless no
        allowed token holds them all. Only tokens consistent with `fixed` are allowed here,
        so this is a handful of ids."""
        ids = mask.nonzero().flatten().tolist()
        whole = [i for i in ids if self.tokenizer.decode_bytes([i]).startswith(fixed)]
        if not whole or len(whole) == len(ids):
            return mask
        out = torch.zeros_like(mask)
        out[whole] = True
        return out

    def accept(self, token_id: int) -> None:
        if token_id in self.stop_ids and self.matcher.is_accepting():
            return
        if not self.matcher.consume_token(token_id):
            raise RuntimeError(f"grammar rejected token {token_id}: {self.matcher.get_error()}")
