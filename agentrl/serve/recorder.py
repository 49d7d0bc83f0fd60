"""Per-session token recording for the OpenAI-compatible proxy.

A black-box agent talks chat messages; we must still train on the exact tokens the model
sampled. Each session (keyed by the client) holds trajectory segments. On a new request:

1. `messages`: the request repeats the session's recorded messages and adds new ones (tool
   results, user turns). The engine gets recorded ids + the fixed-base delta of the new
   messages, so the model sees its own sampled tokens, never a re-rendering of them.
2. `tokens`: otherwise, if the re-rendered prompt's ids extend the recorded ids, append the
   difference (mask 0).
3. `new`: otherwise the client rewrote history (summarized, dropped turns): start a new
   segment from the rendered prompt. Each segment is a valid `Trajectory` on its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.engines.base import GenerateResult
from agentrl.serve.messages import same_message
from agentrl.types import Message, Trajectory, Turn


@dataclass
class Session:
    id: str
    segments: list[Trajectory] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_sampled: list[int] = field(default_factory=list)
    open: bool = False  # the last segment ends with sampled tokens we can extend


class SessionRecorder:
    """Sessions and their segments; all methods are called under the session's lock."""

    def __init__(self, chat: ChatFormat) -> None:
        self.chat = chat
        self.sessions: dict[str, Session] = {}

    def session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            self.sessions[session_id] = Session(session_id)
        return self.sessions[session_id]

    def prepare(
        self, s: Session, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], Trajectory]:
        """The ids to generate from, with the observation already recorded (mask 0)."""
        cur = s.segments[-1] if s.segments and s.open else None
        if cur is not None and cur.metadata.get("tools") == (tools or []):
            n = len(cur.messages)
            prefix = len(messages) > n and all(
                same_message(a, b) for a, b in zip(cur.messages, messages[:n], strict=False)
            )
            if prefix:
                new = messages[n:]
                obs = self.chat.observation_ids(new, tools, sampled_ids=s.last_sampled)
                return self._extend(cur, obs, new, "messages"), cur
            prompt = self.chat.prompt_ids(messages, tools)
            if len(prompt) > len(cur.input_ids) and prompt[: len(cur.input_ids)] == cur.input_ids:
                new = messages[n:] if len(messages) > n else []
                obs = prompt[len(cur.input_ids) :]
                return self._extend(cur, obs, new, "tokens"), cur
        else:
            prompt = self.chat.prompt_ids(messages, tools)
        traj = Trajectory(prompt_ids=prompt, messages=list(messages), group_id=s.id)
        traj.metadata.update(
            {"session": s.id, "segment": len(s.segments), "tools": tools or [], "appends": []}
        )
        s.segments.append(traj)
        return list(prompt), traj

    @staticmethod
    def _extend(traj: Trajectory, obs: list[int], new: list[Message], how: str) -> list[int]:
        traj.append(obs, trained=False)
        traj.turns[-1].obs_end = len(traj.response_ids)
        traj.messages += new
        traj.metadata["appends"].append(how)
        return traj.input_ids

    def commit(
        self, s: Session, traj: Trajectory, out: GenerateResult, text: str, message: Message
    ) -> None:
        """Record one generation (mask 1) and the assistant message returned to the client."""
        start = len(traj.response_ids)
        traj.append(list(out.token_ids), trained=True, logprobs=list(out.logprobs))
        end = len(traj.response_ids)
        traj.turns.append(
            Turn(
                start,
                end,
                end,
                text=text,
                tool_calls=message.tool_calls,
                finish_reason=out.finish_reason,
            )
        )
        traj.messages.append(message)
        s.last_sampled = list(out.token_ids)
        s.open = True

    def fail(self, s: Session, traj: Trajectory, error: str) -> None:
        """An engine failure closes the segment; the next request starts a new one."""
        traj.termination = "engine_error"
        traj.metadata["error"] = error
        s.open = False

    def trajectories(self, session_id: str | None = None) -> list[Trajectory]:
        sessions = (
            [self.sessions[session_id]]
            if session_id in self.sessions
            else ([] if session_id else list(self.sessions.values()))
        )
        return [t for s in sessions for t in s.segments]

    def set_reward(self, session_id: str, reward: float) -> int:
        """Reward every segment of a session (the client scores the episode it ran)."""
        segs = self.trajectories(session_id)
        for t in segs:
            t.reward = reward
        return len(segs)

    def clear(self, session_id: str | None = None) -> None:
        if session_id is None:
            self.sessions.clear()
        else:
            self.sessions.pop(session_id, None)
