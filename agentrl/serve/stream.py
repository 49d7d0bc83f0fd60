"""Server-sent `chat.completion.chunk`s, built from tokens as the engine samples them.

Content is streamed as it is decoded. Once the text may be starting a tool call (the tool
format's marker, or a possible prefix of it at the tail) content is held back; when the
turn ends the held text is parsed exactly as a non-streaming response would be, and each
call goes out as vLLM's server sends them: a chunk with the call's `index`, `id`, `type` and
`name` (arguments ""), then its arguments. So a client that concatenates deltas gets the same
message the non-streaming endpoint returns (and that the recorder stores), never a call that
was announced and then failed to parse. Reasoning (`<think>...</think>`, opened by the model
or by the generation prompt) is held back too, as the parser drops it from `content`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.serve.messages import finish_reason, logprob_entries
from agentrl.types import Message

# Text that may start a tool call, per tool format; formats not listed hold everything back.
STREAM_MARKERS: dict[str, tuple[str, ...]] = {
    "hermes": ("<tool_call>",),
    "llama3": ("<|python_tag|>", "{"),
    "json": ("{",),
    "none": (),
}


_THINKING: dict[tuple[str, str], bool] = {}


def _opens_thinking(chat: ChatFormat) -> bool:
    """Whether the generation prompt itself opens `<think>` (R1-style templates), so the
    sampled text is reasoning until `</think>` (computed once per chat format)."""
    key = (chat.chat_template or "", repr(sorted(chat.template_kwargs.items())))
    if key not in _THINKING:
        try:
            prompt = chat.render([{"role": "user", "content": "x"}], add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template that cannot render this probe
            prompt = ""
        _THINKING[key] = prompt.rstrip().endswith("<think>")
    return _THINKING[key]


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


class ChoiceStream:
    """Content deltas of one choice, from the ids sampled so far."""

    def __init__(self, chat: ChatFormat, tool_format: str) -> None:
        self.chat = chat
        self.markers = STREAM_MARKERS.get(tool_format)
        self.reasoning = _opens_thinking(chat)  # the prompt leaves the model inside <think>
        self.sent = ""  # content streamed so far (a prefix of the final content)
        self.held = False

    def _safe(self, text: str) -> str:
        """The longest prefix of `text` that is surely content."""
        head = text.lstrip()
        if self.reasoning or head.startswith("<think>") or (head and "<think>".startswith(head)):
            if "</think>" not in text:
                return ""
            text = text.split("</think>", 1)[1]
        if self.markers is None:
            return ""
        cut = len(text)
        for m in self.markers:
            at = text.find(m)
            if at >= 0:
                cut, self.held = min(cut, at), True
            else:  # a marker may be starting at the tail
                for k in range(min(len(m) - 1, len(text)), 0, -1):
                    if text.endswith(m[:k]):
                        cut = min(cut, len(text) - k)
                        break
        text = text[:cut].lstrip()
        return text.rstrip().rstrip("\ufffd")  # trailing space / a split character waits

    def delta(self, ids: list[int]) -> str:
        if self.held:
            return ""
        safe = self._safe(self.chat.sampled_text(ids))
        if not safe.startswith(self.sent) or len(safe) <= len(self.sent):
            return ""
        piece, self.sent = safe[len(self.sent) :], safe
        return piece

    def final(self, message: Message) -> tuple[str, list[dict[str, Any]]]:
        """(content still to send, tool-call deltas) once the turn's message is known."""
        content = message.content or ""
        rest = content[len(self.sent) :] if content.startswith(self.sent) else ""
        calls: list[dict[str, Any]] = []
        for i, c in enumerate(message.tool_calls):
            head = {"name": c.name, "arguments": ""}
            calls.append({"index": i, "id": c.id, "type": "function", "function": head})
            calls.append({"index": i, "function": {"arguments": json.dumps(c.arguments)}})
        return rest, calls


class ChunkWriter:
    """The chunks of one streamed completion (all choices share its id)."""

    def __init__(
        self, model: str, logprobs: bool, chat: ChatFormat, token_ids: bool = False
    ) -> None:
        self.id = f"chatcmpl-{int(time.time() * 1000):x}"
        self.created = int(time.time())
        self.model = model
        self.logprobs = logprobs
        self.chat = chat
        self.token_ids = token_ids  # `return_token_ids`: each chunk's sampled ids (vLLM's)
        self.prompt_ids: list[int] | None = None  # sent once, on the first chunk

    def chunk(
        self,
        index: int,
        delta: dict[str, Any],
        *,
        finish: str | None = None,
        tokens: list[tuple[int, float, list[tuple[int, float]]]] | None = None,
    ) -> str:
        choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish}
        if self.token_ids:
            choice["token_ids"] = [t[0] for t in tokens or []]
        if self.logprobs:
            entries = None
            if tokens:
                ids, lps, tops = zip(*tokens, strict=True)
                entries = logprob_entries(self.chat, list(ids), list(lps), list(tops))
            choice["logprobs"] = {"content": entries} if entries else None
        extra: dict[str, Any] = {}
        if self.prompt_ids is not None:
            extra["prompt_token_ids"], self.prompt_ids = self.prompt_ids, None
        return sse(self._body([choice], **extra))

    def finish_chunk(self, index: int, finish: str, message: Message) -> str:
        return self.chunk(index, {}, finish=finish_reason(finish, message))

    def usage_chunk(self, usage: dict[str, int]) -> str:
        return sse(self._body([], usage=usage))

    def _body(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
