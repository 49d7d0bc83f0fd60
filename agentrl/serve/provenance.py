"""What a served segment records about how its ids were made, and the check that another
checkpoint reads them the same way.

Token ids only mean something under the tokenizer that made them, and a recorded prompt only
under the chat template that rendered it. Every segment `agentrl serve` records carries the
tokenizer's name, the template and its sha256, a sha256 of the vocabulary and the tool format
(`recorded_metadata`); `replay` (`agentrl serve --replay`) compares a checkpoint against them
(`mismatch`) before it scores a single token, so a checkpoint with another tokenizer is refused
by name instead of producing log-prob differences of unrelated tokens.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentrl.chat.format import ChatFormat


def template_sha256(template: str | None) -> str:
    return hashlib.sha256((template or "").encode()).hexdigest()


def vocab_sha256(tokenizer: Any) -> str:
    """sha256 of the token → id map, added tokens included (order-independent)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def recorded_metadata(chat: ChatFormat, model_name: str, tokenizer: str | None) -> dict:
    """What every segment records about how its ids were made: the tokenizer to decode them
    (`agentrl view` reads `tokenizer`), its vocabulary's hash, the chat template and tool
    format."""
    template = chat.chat_template or ""
    return {
        "tokenizer": tokenizer or getattr(chat.tokenizer, "name_or_path", "") or "",
        "vocab_sha256": vocab_sha256(chat.tokenizer),
        "chat_template": template,
        "chat_template_sha256": template_sha256(template),
        "tool_format": chat.tool_format,
        "served_model": model_name,
    }


def mismatch(recorded: dict[str, Any], chat: ChatFormat) -> str | None:
    """Why `chat` (a checkpoint's tokenizer and template) cannot read ids recorded under
    `recorded` (a segment's metadata), or None. A file from before a field was recorded is not
    checked on that field."""
    want = recorded.get("chat_template_sha256")
    have = template_sha256(chat.chat_template)
    if isinstance(want, str) and want != have:
        return (
            f"chat template differs: recorded chat_template_sha256 {want[:12]}..., "
            f"the checkpoint's is {have[:12]}..."
        )
    want = recorded.get("vocab_sha256")
    have = vocab_sha256(chat.tokenizer)
    if isinstance(want, str) and want != have:
        return f"vocabulary differs: recorded vocab_sha256 {want[:12]}..., the checkpoint's is {have[:12]}..."
    return None
