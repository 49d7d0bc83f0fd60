"""Wrap any Gymnasium env with a discrete or text action space as a chat env.

`GymTextEnv("CliffWalking-v1", reward_range=(-100, 0))` makes a `games/*` env from a
Gymnasium id (or an env instance, or a zero-argument factory):

* Observation: a user prompt (instructions, the legal actions, the first state); after each
  move, the new state as text. The state is the env's own text observation when it has one,
  else its ANSI render (colour codes turned into `[x]` marks), else `repr(obs)`. Override
  `describe` for a better one.
* Tools: `act(action)`: an action index or name (Discrete), or a string (Text). A move can
  also be written as `<action>...</action>` in plain text (`text_actions=True`).
* Reward: the wrapped env's per-step reward, passed through unchanged; `reward_range` must
  bound it (Gymnasium 1.x envs no longer declare one).
* Termination: the wrapped env's `terminated`/`truncated`; `max_turns` also truncates. A
  turn with no legal move costs the turn but does not step the game.
* Oracle: subclasses override `oracle_move()`; the base class has none.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym

from agentrl.types import Message, ToolCall

from ..core import AgentEnv, Observation

_HIGHLIGHT = re.compile(r"\x1b\[[0-9;]*m(.+?)\x1b\[0m")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.S)


class GymTextEnv(AgentEnv):
    family = "games"
    description = "A Gymnasium env played through an `act` tool."
    max_turns = 30

    def __init__(
        self,
        env: str | gym.Env | Callable[[], gym.Env] = "FrozenLake-v1",
        env_kwargs: dict[str, Any] | None = None,
        action_names: list[str] | None = None,
        instructions: str = "Play the game. Make one move per turn with the act tool.",
        reward_range: tuple[float, float] = (0.0, 1.0),
        text_actions: bool = True,
        max_turns: int | None = None,
    ) -> None:
        if isinstance(env, str):
            kwargs = dict(env_kwargs or {})
            if "render_mode" not in kwargs and _renders_ansi(env):
                kwargs["render_mode"] = "ansi"
            env = gym.make(env, **kwargs)
        self.env: gym.Env = env if isinstance(env, gym.Env) else env()
        space = self.env.action_space
        if not isinstance(space, (gym.spaces.Discrete, gym.spaces.Text)):
            raise TypeError(f"GymTextEnv needs a Discrete or Text action space, got {space}")
        self.action_names = action_names
        self.instructions, self.text_actions = instructions, text_actions
        self.reward_range = reward_range
        if max_turns is not None:
            self.max_turns = max_turns
        self.turn = 0
        self.last_obs: Any = None  # the wrapped env's own observation

    # -- hooks ---------------------------------------------------------------------------
    def describe(self, obs: Any) -> str:
        """The state as text."""
        if isinstance(obs, str):
            return obs
        if self.env.render_mode == "ansi":
            return _ANSI.sub("", _HIGHLIGHT.sub(r"[\1]", str(self.env.render()))).strip("\n")
        return repr(obs)

    def oracle_move(self) -> int | str | None:
        """The gold policy's move in the current state; None when there is no oracle."""
        return None

    # -- actions -------------------------------------------------------------------------
    def legal_actions(self) -> str:
        space = self.env.action_space
        if isinstance(space, gym.spaces.Text):
            return f"a string of {space.min_length}-{space.max_length} characters"
        assert isinstance(space, gym.spaces.Discrete)
        ids = range(int(space.start), int(space.start + space.n))
        if self.action_names:
            return ", ".join(f"{i} ({n})" for i, n in zip(ids, self.action_names, strict=True))
        return ", ".join(str(i) for i in ids)

    def parse_action(self, raw: Any) -> Any:
        """Validate a move; raises ValueError with a message the model will see."""
        space = self.env.action_space
        move: Any  # the wrapped space's own element: text or an int
        if isinstance(space, gym.spaces.Text):
            move = str(raw).strip().lower()
        elif self.action_names and str(raw).strip().lower() in self.action_names:
            discrete: Any = space  # action_names name a Discrete space's actions
            move = int(discrete.start) + self.action_names.index(str(raw).strip().lower())
        else:
            try:
                move = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{raw!r} is not a move; legal: {self.legal_actions()}") from None
        if not space.contains(move):
            raise ValueError(f"{raw!r} is not a legal move; legal: {self.legal_actions()}")
        return move

    @property
    def tool_schema(self) -> dict[str, Any]:
        arg: dict[str, Any] = (
            {"type": "string"}
            if isinstance(self.env.action_space, gym.spaces.Text)
            else {"type": ["integer", "string"]}
        )
        arg["description"] = f"Your move: {self.legal_actions()}."
        params = {"type": "object", "properties": {"action": arg}, "required": ["action"]}
        return {
            "type": "function",
            "function": {"name": "act", "description": "Make one move.", "parameters": params},
        }

    # -- gym API -------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self.turn = 0
        self.last_obs, info = self.env.reset(seed=seed, options=options)
        prompt = (
            f"{self.instructions}\nLegal moves: {self.legal_actions()}.\n\n"
            f"{self.describe(self.last_obs)}"
        )
        return Observation([Message("user", prompt)], [self.tool_schema]), dict(info)

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        move, chosen, errors = None, -1, {}
        for i, call in enumerate(action.tool_calls):
            try:
                if move is not None:
                    raise ValueError("one move per turn; this call was ignored")
                move, chosen = self.parse_action(_call_arg(call)), i
            except ValueError as e:
                errors[i] = f"Error: {e}"
        note = "No move found: call act(action) or write <action>...</action>."
        if not action.tool_calls and self.text_actions:
            found = _ACTION_TAG.findall(action.content)
            try:
                move = self.parse_action(found[-1]) if found else None
            except ValueError as e:
                note = f"Error: {e}"
        info: dict[str, Any] = {}
        reward, terminated, truncated = 0.0, False, False
        if move is not None:
            self.last_obs, r, terminated, truncated, info = self.env.step(move)
            reward = float(r)
            note = f"{self.describe(self.last_obs)}\nReward: {reward:g}"
            note += "\nGame over." if terminated else ""
        replies = [
            Message(
                "tool", note if i == chosen else errors[i], tool_call_id=c.id or None, name=c.name
            )
            for i, c in enumerate(action.tool_calls)
        ] or [Message("user", note)]
        truncated = bool(truncated) or (self.turn >= self.max_turns and not terminated)
        return Observation(replies), reward, bool(terminated), truncated, dict(info)

    def oracle_action(self) -> Message | None:
        move = self.oracle_move()
        if move is None:
            return None
        call = ToolCall("act", {"action": move}, id=f"call_{self.turn}")
        return Message("assistant", "", tool_calls=[call])

    def close(self) -> None:
        self.env.close()


def _renders_ansi(env_id: str) -> bool:
    """Whether a registered Gymnasium env declares an ANSI render. Asking one that does not
    (Blackjack-v1) only warns, then fails at the first render: such envs use `repr(obs)`.
    A `module:Name-v0` id (Gymnasium's own form) imports its module, which registers it."""
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    entry = gym.spec(name).entry_point
    creator = entry if callable(entry) else gym.envs.registration.load_env_creator(cast(str, entry))
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    return "ansi" in modes


def _call_arg(call: ToolCall) -> Any:
    if call.parse_error:
        raise ValueError(f"could not parse tool call: {call.parse_error}")
    if call.name != "act":
        raise ValueError(f"unknown tool {call.name!r}; available: act")
    if "action" not in call.arguments:
        raise ValueError("act needs an 'action' argument")
    return call.arguments["action"]
