"""Retokenization drift: would re-rendering the chat `messages` reproduce the trained ids?

Trainers that rebuild the token sequence from chat messages (apply the template, tokenize)
instead of keeping the engine's ids train on text the model never produced: a tool call whose
JSON the template re-serializes differently, a separator the template drops at a tool
boundary, a `<think>` block a template strips from earlier turns, or a BPE merge across the
boundary between a sampled span and an observation. agentrl trains on the sampled ids, so
this diff is a diagnostic: it shows where (and whether) a message-based pipeline, or a
server that re-renders the history, would disagree with what was actually sampled.

Statuses: `match` (identical), `prefix` (the render only appends tokens after the last
trained token, e.g. the newline a template adds after the final `<|im_end|>` — harmless),
`drift` (the render differs inside the trained sequence; `first` is the first divergent
position in `prompt_ids + response_ids`), `error` (the template could not render).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.types import Trajectory

Status = Literal["match", "prefix", "drift", "error"]


@dataclass
class Drift:
    status: Status
    first: int | None = None
    where: str = ""
    rendered_ids: list[int] = field(default_factory=list)
    # Non-equal difflib opcodes (tag, i1, i2, j1, j2): i over trained ids, j over rendered.
    ops: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "first": self.first,
            "where": self.where,
            "ops": [list(o) for o in self.ops],
            "error": self.error,
        }


def env_tools(env_id: str) -> list[dict[str, Any]] | None:
    """The tool schemas env `env_id` advertises (tool lists do not depend on the seed)."""
    if env_id not in _TOOLS_CACHE:
        try:
            from agentrl.envs import make

            env = make(env_id)
            try:
                _TOOLS_CACHE[env_id] = env.reset(seed=0)[0].tools
            finally:
                env.close()
        except Exception:  # noqa: BLE001 - unknown or broken env: render without tools
            _TOOLS_CACHE[env_id] = None
    return _TOOLS_CACHE[env_id]


_TOOLS_CACHE: dict[str, list[dict[str, Any]] | None] = {}


def episode_tools(t: Trajectory) -> list[dict[str, Any]] | None:
    """`metadata['tools']` (what the rollout showed the model), else the env's own schemas."""
    tools = t.metadata.get("tools")
    if isinstance(tools, list):
        return tools
    return env_tools(t.env_id) if t.env_id else None


def render_ids(t: Trajectory, tokenizer: Any) -> list[int]:
    """The ids a message-based pipeline would train on: template text, then tokenized.

    Tools come from `episode_tools`; if they are wrong or missing, a template that lists
    tools differs in the system turn, which the diff then reports as prompt drift.
    """
    if not t.messages:
        raise ValueError("trajectory has no messages to re-render")
    # ChatFormat renders like the rollout did: a template that ignores `tools` gets them
    # injected hermes style (agentrl.chat.inject), else it is the plain template render.
    from agentrl.chat import chat_format_for

    text = chat_format_for(tokenizer).render(
        t.messages,
        episode_tools(t) or None,
        add_generation_prompt=t.messages[-1].role != "assistant",
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def locate(t: Trajectory, pos: int) -> str:
    """Name the region of `prompt_ids + response_ids` that holds position `pos`."""
    n_prompt = len(t.prompt_ids)
    if pos < n_prompt:
        return "prompt"
    r = pos - n_prompt
    for k, u in enumerate(t.turns):
        if u.start <= r < u.end:
            return f"turn {k} (sampled)"
        if u.end <= r < u.obs_end:
            return f"turn {k} (env/tool)"
    return "end of episode" if r >= len(t.response_ids) else "response"


def template_drift(t: Trajectory, tokenizer: Any) -> Drift:
    """Token-level diff of the trained ids against the chat-template re-render."""
    try:
        rendered = render_ids(t, tokenizer)
    except Exception as e:  # noqa: BLE001 - any template failure is a finding, not a crash
        return Drift("error", error=f"{type(e).__name__}: {e}")
    trained = t.prompt_ids + t.response_ids
    if rendered == trained:
        return Drift("match", rendered_ids=rendered)
    if rendered[: len(trained)] == trained:
        op = ("insert", len(trained), len(trained), len(trained), len(rendered))
        return Drift("prefix", rendered_ids=rendered, ops=[op], where="end of episode")
    matcher = difflib.SequenceMatcher(None, trained, rendered, autojunk=False)
    n = len(trained)
    # An insert after the last trained token is the same harmless tail as in `prefix`.
    ops: list[tuple[str, int, int, int, int]] = [
        o for o in matcher.get_opcodes() if o[0] != "equal" and not (o[0] == "insert" and o[1] == n)
    ]
    first = _first_difference(trained, rendered)
    return Drift("drift", first, locate(t, first), rendered, ops)


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
