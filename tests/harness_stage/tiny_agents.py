"""The examples in examples/harness, sized for the tiny random model of the tests.

A random model writes nothing a harness can parse unless the gateway constrains it, and its
turns are slow on a CPU: these wrappers only pass smaller limits (and, for mini-swe-agent's
tool-call mode, `tool_choice="required"` in its litellm `model_kwargs`, so the gateway's
grammar makes each turn a real bash call). The programs themselves are unchanged.
"""

from __future__ import annotations

from typing import Any

import mini_swe
import smolagents_calc


def smol(task: dict[str, Any], base_url: str) -> str:
    return smolagents_calc.solve(task, base_url, max_steps=2, max_tokens=256)


def mini_bash(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """mini-swe-agent's default tool-call mode; every turn a bash call (forced)."""
    kwargs = {"tool_choice": "required", "max_tokens": 256, "seed": 0}
    return mini_swe.solve(task, base_url, step_limit=2, model_kwargs=kwargs)


def mini_text(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """mini-swe-agent's text mode: a random model's turns never parse, each is dropped from
    the history (a split session) until its third format error ends the run."""
    return mini_swe.solve(task, base_url, config="mini_textbased", model_kwargs={"max_tokens": 24})


def mini_text_flaky(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Odd seeds crash mini-swe-agent itself at start (a config it cannot find)."""
    if task["seed"] % 2:
        return mini_swe.solve(task, base_url, config="no-such-config")
    return mini_text(task, base_url)
