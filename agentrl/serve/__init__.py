"""The recording gateway (OpenAI Chat Completions and Responses, Anthropic Messages): it
records token-exact trajectories of black-box agents.

`create_app` (the HTTP server) needs the `serve` extra and is imported on first use, so the
recording parts (`recorder`, `journal`, `messages`) work without fastapi installed."""

from __future__ import annotations

from typing import Any

from agentrl.serve.recorder import Session, SessionRecorder

__all__ = ["Session", "SessionRecorder", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from agentrl.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'agentrl.serve' has no attribute {name!r}")
