"""Token-exact chat formatting: prompts and observations rendered by the model's own template.

The rollout never re-tokenizes what the model sampled. It renders the first prompt with the
tokenizer's chat template, appends the engine's token ids verbatim, and between turns appends
only the *delta* the template would add for the new messages (tool results, user feedback)
plus the next generation prompt. That delta comes from the "fixed base" method: render a fixed
conversation `[user, assistant(<marker>)]` followed by the new messages, and keep the text after
the marker. The delta is therefore independent of the real history, which matters for templates
that re-render earlier turns differently (Qwen3 drops earlier `<think>` blocks): the sequence we
train on is what the model actually saw while sampling, token for token.

The delta starts with the template's end-of-turn text (`<|im_end|>\\n`, `<|eot_id|>`). If the
model stopped on its own end-of-turn token, that token is already among the sampled ids and the
delta skips it; if the generation hit its length limit, the whole closing goes into the
(masked) observation so the next turn still sees a well-formed conversation.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.inject import inject_tools, template_renders_tools
from agentrl.chat.parsers import detect_format, parse, split_reasoning
from agentrl.types import Message, ToolCall

# End-of-turn / end-of-text tokens of the common template families; the ones a tokenizer has
# as special tokens become stop tokens. Only special ones: in Gemma's vocabulary `</s>` is an
# ordinary added token (id 212, HTML's strikethrough close) that a turn may write.
KNOWN_STOP_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "</s>",
    "<end_of_turn>",
)
_RENDER_CACHE = 512  # rendered id lists kept per ChatFormat (GRPO: n samples share a prompt)
_MARKER = "MARKERXQZ"
_BASE_USER = "USERXQZ"


def to_chat(messages: Sequence[Message | dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the dict form chat templates take."""
    return [m.to_chat() if isinstance(m, Message) else dict(m) for m in messages]


@dataclass
class ChatFormat:
    """Prompt/observation rendering, stop tokens and tool-call parsing for one tokenizer.

    `template_kwargs` are passed to every render (e.g. `{"enable_thinking": False}` for Qwen3);
    `tool_format` is a parser name from `agentrl.chat.parsers` or `auto`.
    """

    tokenizer: Any
    tool_format: str = "auto"
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None
    # A `agentrl.multimodal.VisionProcessor` for vision-language models: the rollout uses it to
    # expand image placeholders in rendered ids and to record pixel inputs. None = text only.
    vision: Any = None
    # Whether tools are injected into the messages (hermes style, `agentrl.chat.inject`)
    # because the template ignores `tools`; None = decide by rendering a probe tool.
    inject: bool | None = None

    def __post_init__(self) -> None:
        if self.chat_template is None:
            self.chat_template = getattr(self.tokenizer, "chat_template", None)
        if not self.chat_template:
            raise ValueError("tokenizer has no chat template; pass chat_template=")
        if self.inject is None:
            self.inject = False
            self.inject = not template_renders_tools(self.render)
        # transformers 5: a tokenizer may declare how its responses parse (`response_template`)
        self.response_template = getattr(self.tokenizer, "response_template", None)
        self._fallback_format = "hermes" if self.inject else detect_format(self.chat_template)
        if self.tool_format == "auto":
            use_template = self.response_template and not self.inject
            self.tool_format = "response_template" if use_template else self._fallback_format
        self._close_cache: dict[str, list[int]] = {}
        self._ids_cache: collections.OrderedDict[str, list[int]] = collections.OrderedDict()
        # A template that reads the clock (Llama 3's date line) must render every time.
        self._cacheable = "strftime_now" not in self.chat_template
        self.stop_token_ids = self._stop_tokens()

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> ChatFormat:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path), **kwargs)

    # -- rendering ---------------------------------------------------------------------
    def render(
        self,
        messages: Sequence[Message | dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
    ) -> str:
        """The template's text for a conversation (tools omitted when empty; injected into
        the messages when the template ignores them)."""
        chat = to_chat(messages)
        if tools and self.inject:
            chat, tools = inject_tools(chat, tools), None
        return self.tokenizer.apply_chat_template(
            chat,
            tools=tools or None,
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        """Text -> ids without adding BOS/EOS: templates write their own special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def prompt_ids(
        self, messages: Sequence[Message | dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """Ids of the conversation so far plus the assistant generation prompt."""
        return self._cached(
            ("prompt", messages, tools),
            lambda: self.encode(self.render(messages, tools, add_generation_prompt=True)),
        )

    def _cached(self, key_parts: tuple[Any, ...], make: Any) -> list[int]:
        """Rendered ids memoized by the exact messages/tools (a copy is returned). Why: a
        rollout renders the same first prompt for every sample of a group, and the same tool
        error observations over and over; jinja + tokenization is most per-episode host work."""
        if not self._cacheable:
            return make()
        kind, messages, tools = key_parts
        try:
            key = json.dumps([kind, to_chat(messages), tools], sort_keys=True)
        except (TypeError, ValueError):  # non-JSON content (images, objects): no caching
            return make()
        ids = self._ids_cache.get(key)
        if ids is None:
            ids = self._ids_cache[key] = make()
            if len(self._ids_cache) > _RENDER_CACHE:
                self._ids_cache.popitem(last=False)
        else:
            self._ids_cache.move_to_end(key)
        return list(ids)

    def observation_text(
        self, new_messages: Sequence[Message | dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> str:
        """Fixed-base delta as text: assistant closing + new messages + generation prompt."""
        base: list[Message | dict[str, Any]] = [
            Message("user", _BASE_USER),
            Message("assistant", _MARKER),
        ]
        full = self.render([*base, *new_messages], tools, add_generation_prompt=True)
        if full.count(_MARKER) != 1:
            raise ValueError("chat template does not render assistant content verbatim")
        return full.split(_MARKER, 1)[1]

    def closing_ids(self, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Ids the template puts after an assistant message's content (e.g. `<|im_end|>\\n`)."""
        key = "tools" if tools else ""
        if key not in self._close_cache:
            base = [Message("user", _BASE_USER), Message("assistant", _MARKER)]
            text = self.render(base, tools)
            self._close_cache[key] = self.encode(text.split(_MARKER, 1)[1])
        return self._close_cache[key]

    def observation_ids(
        self,
        new_messages: Sequence[Message | dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        sampled_ids: Sequence[int] = (),
        stopped: bool | None = None,
    ) -> list[int]:
        """Ids to append after the sampled assistant tokens before the next generation.

        `stopped` says whether the generation ended on a stop token (default: whether the last
        sampled id is one). Then the template's end-of-turn token is already in the sequence
        and is skipped; otherwise the full closing is included.
        """
        ids = self._cached(
            ("obs", new_messages, tools),
            lambda: self.encode(self.observation_text(new_messages, tools)),
        )
        if stopped is None:
            stopped = bool(sampled_ids) and sampled_ids[-1] in self.stop_token_ids
        if stopped and ids and ids[0] in self.stop_token_ids:
            return ids[1:]
        return ids

    def assistant_ids(
        self, message: Message, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """What the template renders for one assistant message after the generation prompt,
        closing included: the ids a model that follows the template exactly would sample
        (plus the trailing newline most templates add). Used by the linter and tests."""
        head = self.render([Message("user", _BASE_USER)], tools, add_generation_prompt=True)
        full = self.render([Message("user", _BASE_USER), message], tools)
        if not full.startswith(head):
            raise ValueError("template renders the assistant turn differently from its prompt")
        return self.encode(full[len(head) :])

    @property
    def end_of_turn_id(self) -> int | None:
        """The token the model emits to end its turn (`<|im_end|>`, `<|eot_id|>`)."""
        close = self.closing_ids()
        if close and close[0] in self.stop_token_ids:
            return close[0]
        return self.tokenizer.eos_token_id

    def sampled_text(self, ids: Sequence[int]) -> str:
        """Text of sampled ids for parsing: stop tokens dropped, other special tokens kept
        (`<tool_call>` is a special token in many vocabularies)."""
        stops = set(self.stop_token_ids)
        return self.decode([i for i in ids if i not in stops])

    # -- parsing -----------------------------------------------------------------------
    def parse(
        self, text: str, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, list[ToolCall]]:
        """Sampled text -> (content without reasoning, tool calls); `tools` are the schemas
        the prompt showed (formats with text arguments cast them to the declared types)."""
        _, rest = split_reasoning(text)
        return parse(rest, self.tool_format, tools, self.response_template, self._fallback_format)

    def _stop_tokens(self) -> list[int]:
        tok = self.tokenizer
        vocab = tok.get_vocab()
        special = set(tok.all_special_ids) | {
            i for i, added in tok.added_tokens_decoder.items() if added.special
        }
        ids = [vocab[t] for t in KNOWN_STOP_TOKENS if vocab.get(t) in special]
        if tok.eos_token_id is not None:
            ids.append(int(tok.eos_token_id))
        try:
            close = self.closing_ids()
        except Exception:  # noqa: BLE001 - a template we cannot probe still gets eos
            close = []
        if close and close[0] in special:
            ids.append(close[0])
        return sorted(set(ids))


_FORMATS: dict[int, tuple[Any, ChatFormat]] = {}


def chat_format_for(tokenizer: Any) -> ChatFormat:
    """The default `ChatFormat` of `tokenizer`, built once per tokenizer object: diagnostics
    (doctor, viewer) render exactly as the rollout does, tool injection included."""
    key = id(tokenizer)
    if key not in _FORMATS or _FORMATS[key][0] is not tokenizer:
        _FORMATS[key] = (tokenizer, ChatFormat(tokenizer))
    return _FORMATS[key][1]
