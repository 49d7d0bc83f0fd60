"""One hf-engine request as the worker thread sees it (and telling its caller it was admitted),
and a finished session's cached KV.

Why its own module: the core (`_hf_core`) and every layer (text, fast, vision, and the
vision batch helpers) pass these around; keeping them apart keeps the core to its loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.engines.base import FinishReason, GenerateResult, SamplingParams


@dataclass(eq=False)
class Request:
    """One `generate` call as the worker thread sees it."""

    prompt_ids: list[int]
    params: SamplingParams
    session_id: str | None
    future: asyncio.Future[GenerateResult]
    generator: torch.Generator
    multimodal: dict[str, Any] | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: FinishReason | None = None
    error: str | None = None
    weight_version: int = 0  # at admission: a session's KV is kept only if it still holds
    versions: list[int] = field(default_factory=list)  # per sampled token ("weight_versions")

    def result(self) -> GenerateResult:
        out, lps, top = list(self.output_ids), list(self.logprobs), list(self.top)
        versions = list(self.versions)
        return GenerateResult(out, lps, self.finish or "abort", self.error, top, versions)


@dataclass
class Session:
    ids: list[int]  # prompt + output of the session's last request
    kv: Any  # per layer (k, v) covering ids[:-1] (the last sampled token was never fed back)


def resolve(req: Request) -> None:
    if req.future.done():
        return
    try:
        req.future.set_result(req.result())
    except RuntimeError:  # the future's event loop is already closed
        pass


def tell_admitted(req: Request) -> bool:
    """Call the request's `on_admit` (the episode clock runs again); one that raises fails its
    own request, unadmitted, and nothing else."""
    try:
        if req.params.on_admit is not None:
            req.params.on_admit()
    except Exception as exc:  # noqa: BLE001 - the caller's callback; its request only
        req.finish, req.error = "error", f"on_admit: {type(exc).__name__}: {exc}"
        resolve(req)
        return False
    return True
