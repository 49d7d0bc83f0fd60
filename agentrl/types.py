"""Core data types: messages, tool calls, trajectories.

A `Trajectory` is the single source of truth between rollout and training. It stores the
*exact* token ids the engine sampled (never re-tokenized text), the ids of everything the
environment inserted between turns, and a per-token loss mask that is 1 only on sampled
tokens. The chat messages are kept alongside for humans and the viewer, never for training.

All types round-trip through JSON: `Trajectory.from_json(t.to_json()) == t`, and writing the
result again yields the same bytes (keys are emitted in a fixed order, floats as repr).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

# Why an episode ended (`Trajectory.termination`). Files written by older versions may hold
# other strings; they are read back as they are (the type is for code that writes one).
TerminationReason = Literal[
    "done",  # the env said terminated
    "truncated",  # the env said truncated (other than at its turn limit)
    "max_turns",  # the turn limit: the env's max_turns, or rollout.max_turns when set
    "max_tokens",  # total token budget (prompt + all turns) exhausted
    "overlong",  # one generation hit its per-turn token budget without a stop
    "invalid_tool_calls",  # rollout.max_invalid_tool_calls invalid calls in a row
    "timeout",  # episode wall-clock limit
    "env_error",  # env raised; recorded in metadata["error"]
    "engine_error",  # engine raised or aborted the request; recorded in metadata["error"]
    "sandbox_error",  # the sandbox a tool or grader runs code in failed (`InfraError`)
    "tool_error",  # a tool's own service failed, not the call (`InfraError`)
    "agent_crash",  # the rollout's own code raised (a template, a parser), or an agent program
    # (harness rollout) crashed or called no model
]

# Which side of the line each reason falls on: "policy" outcomes are what the model did (its
# reward stands and it is trained on), "infra" failures are the machine's (their reward is not
# a score of the policy: the trainer leaves them out of the loss and of the group statistics,
# see docs/algorithms.md "Infrastructure failures"). The rule: the episode is the policy's
# when its end follows from the tokens the model sampled and the env's rules alone. So a
# tool that raises on the model's bad arguments, a tool timing out on the model's code, a
# parse error, a turn or token budget are the policy's (they do not even end the episode,
# except through the budgets and `invalid_tool_calls`); a sandbox that cannot start, an
# engine abort, an env that raises, the wall-clock timeout (it measures the machine's load:
# queueing behind other episodes on a shared engine; the policy's own length is bounded by
# the turn and token budgets) are infra. A reason not in the table (a file of another
# version) counts as the policy's: trained, as it was before.
TERMINATION_KIND: dict[str, Literal["policy", "infra"]] = {
    "done": "policy",
    "truncated": "policy",
    "max_turns": "policy",
    "max_tokens": "policy",
    "overlong": "policy",
    "invalid_tool_calls": "policy",
    "timeout": "infra",
    "env_error": "infra",
    "engine_error": "infra",
    "sandbox_error": "infra",
    "tool_error": "infra",
    "agent_crash": "infra",
}


def is_infra_failure(reason: str) -> bool:
    """Whether an episode that ended for `reason` failed for the machine's sake, not the
    policy's (`TERMINATION_KIND`): such episodes are kept on disk but never trained on."""
    return TERMINATION_KIND.get(reason) == "infra"


class InfraError(Exception):
    """Raised by a tool, a grader or an env when the *infrastructure* failed (a sandbox that
    cannot start or died, a tool's backing service down), never for what the model did: the
    episode ends with `reason` and is left out of training (`is_infra_failure`). `ToolSet`
    lets it through instead of showing it to the model as an error result."""

    def __init__(self, reason: TerminationReason, message: str) -> None:
        if not is_infra_failure(reason):
            raise ValueError(f"InfraError reason must be an infra termination, got {reason!r}")
        super().__init__(message)
        self.reason: TerminationReason = reason

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (worker pools)
        return (type(self), (self.reason, str(self)))


@dataclass
class ToolCall:
    """One call the model asked for. `parse_error` is set when the text could not be parsed;
    the env answers such a call with an error result instead of running anything."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    raw: str = ""
    parse_error: str | None = None


@dataclass
class ToolResult:
    """What a tool returned, as the model will see it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    truncated: bool = False
    wall_s: float = 0.0
    # The call itself was invalid (unparsable, unknown tool, arguments off its schema): what
    # `rollout.max_invalid_tool_calls` counts. Serialized only when set.
    invalid: bool = False


@dataclass
class Message:
    """A chat message. `images` holds PIL images for VLM turns (not serialized inline)."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    images: list[Any] = field(default_factory=list)

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI/HF chat-template form of this message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.images:
            parts: list[dict[str, Any]] = [{"type": "image"} for _ in self.images]
            out["content"] = [*parts, {"type": "text", "text": self.content}]
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass(kw_only=True)
class Turn:
    """One assistant generation and the environment's answer to it.

    `start`/`end` index the sampled span inside `Trajectory.response_ids`; `obs_end` marks
    the end of the env/tool tokens appended after it (mask 0). Keyword-only: three adjacent
    ints are too easy to pass in the wrong order.
    """

    start: int
    end: int
    obs_end: int
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    reward: float = 0.0
    finish_reason: str = ""


@dataclass
class Trajectory:
    """One episode, token-exact.

    Invariants (checked by `validate`): `len(response_ids) == len(loss_mask) ==
    len(logprobs)`; mask is 1 exactly on tokens the engine sampled; turns tile the response.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # The policy weight version that sampled each response token (-1 on env tokens); empty
    # when not recorded (older files, engines that do not say). Serialized only when set.
    weight_versions: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    termination: TerminationReason = "done"
    env_id: str = ""
    group_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    multimodal: dict[str, Any] = field(default_factory=dict)

    @property
    def infra_failed(self) -> bool:
        """Ended for the machine's sake, not the policy's (`is_infra_failure`): kept on disk
        and in the viewer, never trained on."""
        return is_infra_failure(self.termination)

    @property
    def turn_rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def append(
        self,
        ids: list[int],
        *,
        trained: bool,
        logprobs: list[float] | None = None,
        versions: list[int] | None = None,
    ) -> None:
        """Append tokens: sampled ones (`trained=True`, with their logprobs and, when known,
        the weight version of each) or env tokens."""
        if trained and (logprobs is None or len(logprobs) != len(ids)):
            raise ValueError("sampled tokens need one logprob each")
        if versions is not None and len(versions) != len(ids):
            raise ValueError("weight versions need one entry per token")
        if versions is not None or self.weight_versions:
            pad = len(self.response_ids) - len(self.weight_versions)
            self.weight_versions += [-1] * pad + (list(versions) if versions else [-1] * len(ids))
        self.response_ids += ids
        self.loss_mask += [1 if trained else 0] * len(ids)
        self.logprobs += list(logprobs) if trained and logprobs is not None else [0.0] * len(ids)

    def validate(self) -> None:
        n = len(self.response_ids)
        if not (len(self.loss_mask) == len(self.logprobs) == n):
            raise ValueError(
                f"length mismatch: response {n}, mask {len(self.loss_mask)}, "
                f"logprobs {len(self.logprobs)}"
            )
        if self.weight_versions and len(self.weight_versions) != n:
            raise ValueError(f"weight_versions cover {len(self.weight_versions)} of {n} tokens")
        pos = 0
        for i, t in enumerate(self.turns):
            if not (t.start == pos and t.start <= t.end <= t.obs_end):
                raise ValueError(f"turn {i} does not tile the response: {t.start}..{t.obs_end}")
            if any(m != 1 for m in self.loss_mask[t.start : t.end]) or any(
                m != 0 for m in self.loss_mask[t.end : t.obs_end]
            ):
                raise ValueError(f"turn {i}: loss mask is not 1 on sampled / 0 on env tokens")
            pos = t.obs_end
        if self.turns and pos != n:
            raise ValueError(f"turns cover {pos} of {n} response tokens")

    # -- serialization -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["weight_versions"]:
            del d["weight_versions"]  # unrecorded: the line reads as before the field existed
        for m in d["messages"]:
            m["images"] = len(m["images"])  # images live in `multimodal`; keep the count
        for turn in d["turns"]:
            for r in turn["tool_results"]:
                if not r["invalid"]:
                    del r["invalid"]  # unset: the line reads as before the field existed
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["turns"] = [_turn_from_dict(t) for t in d.get("turns", [])]
        d["messages"] = [_message_from_dict(m) for m in d.get("messages", [])]
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown trajectory fields: {sorted(unknown)}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Trajectory:
        return cls.from_dict(json.loads(line))


def _turn_from_dict(d: dict[str, Any]) -> Turn:
    d = dict(d)
    d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls", [])]
    d["tool_results"] = [ToolResult(**r) for r in d.get("tool_results", [])]
    return Turn(**d)


def _message_from_dict(d: dict[str, Any]) -> Message:
    d = dict(d)
    d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls", [])]
    n_images = d.pop("images", 0)
    d["images"] = [None] * n_images if isinstance(n_images, int) else list(n_images)
    return Message(**d)


@dataclass
class TrajectoryGroup:
    """The n samples of one prompt; group-relative estimators (GRPO, RLOO) work per group."""

    group_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]


def write_jsonl(path: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write one trajectory per line; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(t.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> Iterator[Trajectory]:
    """Read trajectories; a bad line raises naming its line number.

    Lines with `metadata["snapshot"]` are successive states of one growing trajectory (the
    `agentrl serve` journal appends a session's segment each time a request on it ends): the
    newest line of each snapshot is yielded once, where its first line stood."""
    out: list[Trajectory] = []
    at: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                t = Trajectory.from_json(line)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{i}: bad trajectory line: {e}") from e
            key = t.metadata.get("snapshot")
            if isinstance(key, str) and key in at:
                out[at[key]] = t
                continue
            if isinstance(key, str):
                at[key] = len(out)
            out.append(t)
    yield from out
