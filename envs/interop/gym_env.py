"""Gymnasium's own envs as chat envs: `gym:FrozenLake-v1`, `gym:Taxi-v4`, `gym:CliffWalking-v1`.

Any id in Gymnasium's registry whose env renders as text (`render_mode="ansi"`) and takes a
`Discrete` action can be played by a language model: the rendered board is the user message,
and the reply names the action as a number (`2`, `[2]` or `action: 2`; the last number in the
reply counts, so the model may think aloud first). The env's own reward and
terminated/truncated flags are the episode's. A reply with no number, or one out of range, is
recorded as an invalid move: it costs the turn, is not sent to the env, and the observation
says why.

Why ansi and Discrete only: those are the envs whose state a model can read as text and whose
actions it can write as text without an encoder; image and Box envs would need one, which is a
policy's business, not an adapter's.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np

from agentrl.types import Message

from ..core import AgentEnv, Observation
from .text import reply_text

_NUMBER = re.compile(r"-?\d+")


def text_ids() -> list[str]:
    """Registry ids whose env declares an 'ansi' render mode (read from their classes'
    metadata without building them; ids whose module fails to import are left out)."""
    out = []
    for env_id, spec in gymnasium.registry.items():
        entry = spec.entry_point
        if not isinstance(entry, str) or ":" not in entry:
            continue
        module, _, attr = entry.partition(":")
        if not module.startswith("gymnasium.envs.toy_text"):
            continue  # importing every module of the registry is slow and may fail
        try:
            cls = gymnasium.envs.registration.load_env_creator(entry)
        except Exception:  # noqa: BLE001 - an id we cannot load is one we cannot reach
            continue
        if "ansi" in (getattr(cls, "metadata", {}) or {}).get("render_modes", []):
            out.append(env_id)
    return sorted(out)


class GymTextEnv(AgentEnv):
    family = "gym"
    description = "A Gymnasium env rendered as text ('ansi'); the reply names a Discrete action."
    max_turns = 100

    def __init__(
        self,
        env_id: str,
        max_turns: int | None = None,
        reward_range: tuple[float, float] | None = None,
        system_prompt: str | None = None,
        **gym_kwargs: Any,
    ) -> None:
        try:
            entry = gymnasium.spec(env_id).entry_point
            load = gymnasium.envs.registration.load_env_creator
            creator = entry if callable(entry) else load(str(entry))
            modes = getattr(creator, "metadata", {})
        except gymnasium.error.Error as e:
            raise KeyError(f"gym:{env_id}: {e}") from None
        if "ansi" not in (modes or {}).get("render_modes", []):
            raise TypeError(f"gym:{env_id}: no 'ansi' render mode, so no text to show a model")
        self.env = gymnasium.make(env_id, render_mode="ansi", **gym_kwargs)
        space = self.env.action_space
        if not isinstance(space, gymnasium.spaces.Discrete):
            raise TypeError(
                f"gym:{env_id}: action space {space} is not Discrete; only text-actionable "
                "envs are wrapped"
            )
        self.env_id, self.n, self.start = env_id, int(space.n), int(space.start)
        if max_turns is not None:
            self.max_turns = max_turns
        if reward_range is not None:
            self.reward_range = reward_range
        self.system_prompt = system_prompt or (
            f"You are playing the Gymnasium environment {env_id}. Each turn you see the "
            f"state as text; reply with one action number from {self.start} to "
            f"{self.start + self.n - 1}."
        )
        self.turn = 0

    def _render(self, obs: Any) -> str:
        text = self.env.render()
        board = text if isinstance(text, str) and text.strip() else ""
        return f"{board.rstrip()}\nobservation: {_plain(obs)}".strip()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self.turn = 0
        messages = [Message("system", self.system_prompt), Message("user", self._render(obs))]
        return Observation(messages), {"gym_info": _plain(info)}

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        found = _NUMBER.findall(reply_text(action))
        move = int(found[-1]) if found else None
        if move is None or not self.start <= move < self.start + self.n:
            why = "no action number" if move is None else f"action {move} is out of range"
            text = f"Invalid move: {why}; reply with a number from {self.start} to {self.start + self.n - 1}."
            truncated = self.turn >= self.max_turns
            return Observation([Message("user", text)]), 0.0, False, truncated, {"invalid": why}
        obs, reward, terminated, truncated, info = self.env.step(move)
        truncated = bool(truncated) or (not terminated and self.turn >= self.max_turns)
        observation = Observation([Message("user", self._render(obs))])
        return observation, float(reward), bool(terminated), truncated, {"gym_info": _plain(info)}

    def close(self) -> None:
        self.env.close()


def _plain(x: Any) -> Any:
    """Numpy values as plain Python, for text and JSON."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x
