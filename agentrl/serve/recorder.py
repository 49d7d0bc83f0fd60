"""Per-session token recording for the OpenAI-compatible proxy.

A black-box agent talks chat messages; we must still train on the exact tokens the model
sampled. Each session (keyed by the client) holds trajectory segments. On a new request:

1. `messages`: the request repeats one open segment's recorded messages and adds new ones
   (tool results, user turns). The engine gets recorded ids + the fixed-base delta of the new
   messages, so the model sees its own sampled tokens, never a re-rendering of them.
2. `tokens`: otherwise, if the re-rendered prompt's ids extend the last segment's ids, append
   the difference (mask 0).
3. `new`: otherwise the client rewrote history (summarized, dropped turns): start a new
   segment from the rendered prompt. Each segment is a valid `Trajectory` on its own.

`n > 1` branches the segment: every choice is its own segment (a copy up to the prompt), so
the client may continue any of them and each stays token-exact.

A session is one episode even when the harness rewrites its history (mini-swe-agent drops a
failed turn, smolagents changes its tool list): every segment carries `metadata["episode"]`
(the run and session) and `metadata["episode_segments"]` (how many segments, not counting
`n > 1` branches, the episode was split into; kept current on every segment), and a reward
goes to every segment. A trainer gives the segments of one episode the episode's reward and
advantage and weighs each by 1 / `episode_segments`, so a split episode counts once. Every change is handed to the
`Journal` as it happens (see `journal`), so a crash loses nothing that finished.

Rendering and tokenising (`plan`) change nothing, so the server runs them in a worker thread
and applies the result (`apply`) on the event loop: a long prompt never stalls other clients,
and a reader of the trajectories never sees a half-extended segment. A session exists only
while a request uses it or once it holds a segment: a refused request leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.engines.base import GenerateResult
from agentrl.serve.messages import same_message
from agentrl.types import Message, Trajectory, Turn

SNAPSHOT_KEY = "snapshot"  # metadata key "run/session/segment": one segment's every snapshot


@dataclass
class Session:
    id: str
    segments: list[Trajectory] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # requests holding it (see SessionRecorder.session / release)


@dataclass
class Plan:
    """What `prepare` will do: extend `traj` by the observation `ids` (`how` is "messages"
    or "tokens"), or start a new segment from the prompt `ids` (`traj` None)."""

    how: str
    traj: Trajectory | None
    ids: list[int]
    new: list[Message]


def is_open(t: Trajectory) -> bool:
    """The segment ends with sampled tokens a next request can extend."""
    return (
        t.termination != "engine_error"
        and bool(t.turns)
        and t.turns[-1].obs_end == len(t.response_ids)
        and t.turns[-1].end == len(t.response_ids)
    )


def last_sampled(t: Trajectory) -> list[int]:
    last = t.turns[-1]
    return t.response_ids[last.start : last.end]


class SessionRecorder:
    """Sessions and their segments; all methods are called under the session's lock.

    `metadata` goes on every segment (tokenizer, template hash, model); `on_change` gets
    each segment whenever a request on it finishes (the journal)."""

    def __init__(
        self,
        chat: ChatFormat,
        metadata: dict[str, Any] | None = None,
        on_change: Callable[[Trajectory], None] | None = None,
        run: str = "",
    ) -> None:
        self.chat = chat
        self.run = run  # prefix of snapshot keys: sessions of different server runs differ
        self.metadata = dict(metadata or {})
        self.on_change = on_change or (lambda t: None)
        self.sessions: dict[str, Session] = {}

    def session(self, session_id: str) -> Session:
        """The session (made if new), held until `release`."""
        if session_id not in self.sessions:
            self.sessions[session_id] = Session(session_id)
        s = self.sessions[session_id]
        s.users += 1
        return s

    def release(self, s: Session) -> None:
        """A request is done with `s`; a session no request recorded anything in goes."""
        s.users -= 1
        if s.users <= 0 and not s.segments and self.sessions.get(s.id) is s:
            del self.sessions[s.id]

    def plan(self, s: Session, messages: list[Message], tools: list[dict[str, Any]] | None) -> Plan:
        """Render and tokenise what the request adds; changes nothing (thread-safe under the
        session's lock)."""
        same_tools = [t for t in s.segments if is_open(t) and t.metadata["tools"] == (tools or [])]
        for cur in reversed(same_tools):  # newest first: the branch the client continued
            n = len(cur.messages)
            prefix = len(messages) > n and all(
                same_message(a, b) for a, b in zip(cur.messages, messages[:n], strict=False)
            )
            if prefix:
                new = messages[n:]
                obs = self.chat.observation_ids(new, tools, sampled_ids=last_sampled(cur))
                return Plan("messages", cur, obs, new)
        prompt = self.chat.prompt_ids(messages, tools)
        last = same_tools[-1] if same_tools and same_tools[-1] is s.segments[-1] else None
        if last is not None:
            if (
                len(prompt) > len(last.input_ids)
                and prompt[: len(last.input_ids)] == last.input_ids
            ):
                n = len(last.messages)
                new = messages[n:] if len(messages) > n else []
                return Plan("tokens", last, prompt[len(last.input_ids) :], new)
        return Plan("new", None, prompt, list(messages))

    def apply(
        self, s: Session, plan: Plan, tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], Trajectory]:
        """Carry out `plan`: the ids to generate from, the observation recorded (mask 0)."""
        if plan.traj is not None:
            return self._extend(plan.traj, plan.ids, plan.new, plan.how), plan.traj
        traj = Trajectory(prompt_ids=plan.ids, messages=plan.new, group_id=s.id)
        self._register(s, traj, tools)
        return list(plan.ids), traj

    def prepare(
        self, s: Session, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], Trajectory]:
        """The ids to generate from, with the observation already recorded (mask 0)."""
        return self.apply(s, self.plan(s, messages, tools), tools)

    def _register(self, s: Session, traj: Trajectory, tools: list[dict[str, Any]] | None) -> None:
        seg = len(s.segments)
        traj.metadata.update(self.metadata)
        traj.metadata.update(
            {
                "session": s.id,
                "segment": seg,
                SNAPSHOT_KEY: f"{self.run}/{s.id}/{seg}",
                "episode": f"{self.run}/{s.id}",
                "tools": tools or [],
                "appends": traj.metadata.get("appends", []),
            }
        )
        s.segments.append(traj)
        splits = sum("branch_of" not in t.metadata for t in s.segments)
        for t in s.segments:  # the journal writes the count with each segment's next change
            t.metadata["episode_segments"] = splits

    def branch(self, s: Session, traj: Trajectory, n: int) -> list[Trajectory]:
        """`traj` and n-1 copies of it as it is now (before sampling), one per choice."""
        out = [traj]
        for _ in range(n - 1):
            copy = Trajectory.from_dict(traj.to_dict())
            copy.metadata["branch_of"] = traj.metadata["segment"]
            copy.metadata.pop("episode_segments", None)
            self._register(s, copy, traj.metadata["tools"])
            out.append(copy)
        return out

    @staticmethod
    def _extend(traj: Trajectory, obs: list[int], new: list[Message], how: str) -> list[int]:
        traj.append(obs, trained=False)
        traj.turns[-1].obs_end = len(traj.response_ids)
        traj.messages += new
        traj.metadata["appends"].append(how)
        return traj.input_ids

    def commit(
        self,
        traj: Trajectory,
        out: GenerateResult,
        text: str,
        message: Message,
        constrained: str | None = None,
        temperature: float | None = None,
    ) -> None:
        """Record one generation (mask 1) and the assistant message returned to the client.
        `constrained` names the grammar the turn was sampled under (its logprobs are the
        unmasked model's, so an off-policy correction can see which turns were masked).
        `metadata["turn_sampling"]` gets one entry per turn: the index of its assistant
        message and the temperature its logprobs are of (what `replay` recomputes)."""
        start = len(traj.response_ids)
        traj.append(list(out.token_ids), trained=True, logprobs=list(out.logprobs))
        end = len(traj.response_ids)
        traj.turns.append(
            Turn(
                start=start,
                end=end,
                obs_end=end,
                text=text,
                tool_calls=message.tool_calls,
                finish_reason=out.finish_reason,
            )
        )
        traj.metadata.setdefault("turn_sampling", []).append(
            {"message": len(traj.messages), "temperature": temperature}
        )
        traj.messages.append(message)
        if constrained:
            traj.metadata.setdefault("constrained_turns", {})[str(len(traj.turns) - 1)] = (
                constrained
            )
        self.on_change(traj)

    def fail(self, traj: Trajectory, error: str) -> None:
        """An engine failure (or a client that left mid-request) closes the segment; the
        next request starts a new one."""
        traj.termination = "engine_error"
        traj.metadata["error"] = error
        self.on_change(traj)

    def trajectories(self, session_id: str | None = None) -> list[Trajectory]:
        sessions = (
            [self.sessions[session_id]]
            if session_id in self.sessions
            else ([] if session_id else list(self.sessions.values()))
        )
        return [t for s in sessions for t in s.segments]

    def set_reward(self, session_id: str, reward: float) -> int:
        """Reward every segment of a session (the trainer scores the episode; the server
        takes it only with the admin token, so the agent cannot score itself)."""
        if not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        segs = self.trajectories(session_id)
        for t in segs:
            t.reward = reward
            self.on_change(t)
        return len(segs)

    def clear(self, session_id: str | None = None) -> None:
        if session_id is None:
            self.sessions.clear()
        else:
            self.sessions.pop(session_id, None)
