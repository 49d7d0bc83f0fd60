"""What `agentrl serve` accepts, and who may read and score what it records.

Why one place: the server listens to any local process, the agent under training included.
Before these limits a 2 MB prompt froze every client for 12 s (tokenised on the event loop), a
100 MB body grew the server to 11 GB until the OOM killer ended it, any client could read
every session, clear them all or post its own (NaN) reward. Every route takes its caps from
`ServeLimits` and its admin check from `AdminAuth`, so a new API (Responses, Anthropic) gets
the same guarantees by using the same two objects:

* Bodies: `read_body` refuses more than `max_body_bytes` (413) from `Content-Length` before
  reading, and stops reading a chunked body at the cap; JSON is decoded with its nesting
  bounded (`agentrl.chat.bounded_json`) off the event loop.
* Prompts: `cheap_token_floor` bounds the token count from the text's length alone (no
  token is longer than the vocabulary's longest), so a hopeless prompt is refused before it
  is rendered or tokenised; the exact count is then checked in a worker thread.
* Admin: reading, rewarding and clearing sessions need `Authorization: Bearer <token>`, a
  token made per server run (`new_token`) and handed to the trainer, never to the agent.
  Generation stays open: the agent needs it, and it cannot score itself.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrl.chat import bounded_json

if TYPE_CHECKING:  # fastapi is the `serve` extra; `ServeLimits` works without it
    from fastapi import Request
    from fastapi.responses import JSONResponse

MIB = 1 << 20
# How long an idle keep-alive connection stays open (uvicorn's default is 5 s). An agent that
# runs a tool for longer than that between two calls reuses a pooled connection the server is
# closing: clients without retries (plain httpx) see a ReadError. Both the `agentrl serve`
# CLI and the trainer's gateway use this.
KEEP_ALIVE_S = 600


@dataclass(frozen=True)
class ServeLimits:
    """Caps on one request; each refusal is a 4xx naming the cap (see the CLI flags)."""

    max_body_bytes: int = 8 * MIB  # a request body, as sent
    max_prompt_tokens: int = 32768  # the rendered prompt (history included)
    max_completion_tokens: int = 32768  # max_tokens / max_completion_tokens a client may ask
    max_messages: int = 4096
    max_tools: int = 256
    max_stop: int = 16  # stop strings
    max_id_chars: int = 256  # session ids (header or `user`), tool-call ids, names
    json_depth: int = bounded_json.MAX_DEPTH

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ServeLimits.{name} must be a positive integer, got {value!r}")


class HTTPError(Exception):
    """A refusal with its HTTP status (400 bad field, 401 no token, 413 too large)."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code

    def response(self, anthropic: bool = False, session: str | None = None) -> JSONResponse:
        """OpenAI's error body (`code` when set, e.g. `context_length_exceeded`), or
        Anthropic's (`{"type": "error", ...}`) for the Messages API."""
        from fastapi.responses import JSONResponse

        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        if session:
            headers["X-Session-ID"] = session
        error: dict[str, Any] = {"message": str(self), "type": self.kind}
        if self.code:
            error["code"] = self.code
        body = {"type": "error", "error": error} if anthropic else {"error": error}
        return JSONResponse(body, status_code=self.status, headers=headers)


async def read_body(request: Request, limits: ServeLimits) -> bytes:
    """The raw body, refused (413) past `max_body_bytes` without reading the rest."""
    cap = limits.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPError(400, f"Content-Length is not a number: {declared[:40]!r}")
        if int(declared) > cap:
            raise HTTPError(413, f"request body of {declared} bytes is over the {cap}-byte cap")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise HTTPError(413, f"request body is over the {cap}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limits: ServeLimits) -> Any:
    """The body as JSON (nesting bounded, decoded in a worker thread); 400 if it is not."""
    raw = await read_body(request, limits)
    try:
        return await asyncio.to_thread(bounded_json.loads, raw, limits.json_depth)
    except (json.JSONDecodeError, TypeError) as e:
        raise HTTPError(400, f"request body is not JSON: {e}") from e


_LONGEST: dict[int, tuple[Any, int]] = {}


def longest_token_chars(tokenizer: Any) -> int:
    """Characters in the vocabulary's longest token (computed once per tokenizer; a token's
    vocabulary string is never shorter than the text it decodes to)."""
    key = id(tokenizer)
    if key not in _LONGEST or _LONGEST[key][0] is not tokenizer:
        longest = max((len(t) for t in tokenizer.get_vocab()), default=1) or 1
        _LONGEST[key] = (tokenizer, longest)
    return _LONGEST[key][1]


def cheap_token_floor(chars: int, tokenizer: Any) -> int:
    """A lower bound on the tokens of `chars` characters of text, without tokenising."""
    return -(-chars // longest_token_chars(tokenizer))


def new_token() -> str:
    """A fresh per-run admin token."""
    return secrets.token_urlsafe(32)


class AdminAuth:
    """The admin endpoints' check: `Authorization: Bearer <token>`, compared in constant
    time. `check` takes the header's value (a route dependency passes it in)."""

    def __init__(self, token: str) -> None:
        if len(token) < 16:
            raise ValueError("the admin token must have at least 16 characters")
        self.token = token

    def check(self, authorization: str | None) -> None:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            raise HTTPError(
                401, "this endpoint needs the server's admin token (Authorization: Bearer ...)"
            )
