"""TextArena games (`textarena` package) as agentrl envs: `textarena:GuessTheNumber-v0`.

The game's observation is the user message; the model's reply is the move (TextArena reads the
bracketed token, `[42]`); the game's own reward for player 0 is the episode's reward, given
when the game ends. TextArena observations repeat the whole history every turn: after the
first, only the part the last move added is sent, since the chat already holds the rest.

Single-player games only (`num_players=1`); a game that needs opponents fails at reset with
TextArena's own message. Word games that download NLTK corpora at reset (Wordle, Hangman) need
those corpora installed beforehand: nothing is fetched here.
"""

from __future__ import annotations

from typing import Any

from agentrl.types import Message

from ..core import AgentEnv, Observation
from .text import reply_text


class TextArenaEnv(AgentEnv):
    family = "textarena"
    description = "A TextArena single-player game; moves are written in the reply."
    max_turns = 30

    def __init__(
        self,
        game: str,
        reward_range: tuple[float, float] = (-1.0, 1.0),
        max_turns: int | None = None,
        system_prompt: str | None = None,
        **game_kwargs: Any,
    ) -> None:
        import textarena as ta

        self.game_id, self._ta = game, ta
        self.game_kwargs = game_kwargs
        self.game = ta.make(env_id=game, **game_kwargs)
        self.reward_range = reward_range
        self.system_prompt = system_prompt
        if max_turns is not None:
            self.max_turns = max_turns
        self.turn, self._seen, self._done = 0, "", False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        # a new game each episode: TextArena's LLMObservationWrapper keeps its history
        # across resets, so a reused game would show the previous episode again
        self.game = self._ta.make(env_id=self.game_id, **self.game_kwargs)
        self.game.reset(num_players=1, seed=seed)
        self.turn, self._seen, self._done = 0, "", False
        messages = [Message("system", self.system_prompt)] if self.system_prompt else []
        messages.append(Message("user", self._observation()))
        return Observation(messages), {"game": self.game_id}

    def _observation(self) -> str:
        _, obs = self.game.get_observation()
        text = str(obs)
        new = text[len(self._seen) :] if text.startswith(self._seen) else text
        self._seen = text
        return new.strip()

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("step() after the game ended; call reset()")
        self.turn += 1
        done, info = self.game.step(reply_text(action))
        if done:
            self._done = True
            rewards, game_info = self.game.close()
            reward = float((rewards or {}).get(0, self.reward_range[0]))
            reason = str((game_info or {}).get(0, {}).get("reason", ""))
            obs = Observation([Message("user", reason)] if reason else [])
            return obs, reward, True, False, {"game_info": game_info, **dict(info or {})}
        truncated = self.turn >= self.max_turns
        obs = Observation([Message("user", self._observation())])
        return obs, 0.0, False, truncated, dict(info or {})
