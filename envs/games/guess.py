"""`games/guess-number-v0`: find a hidden number from "higher"/"lower" hints.

A Gymnasium env (`GuessNumber`, text observations, `Discrete` actions) plus its chat form.

* Observation: the range and, after each guess, "higher", "lower" or "correct".
* Tools: `act(action)` with the guessed integer (or `<action>42</action>`).
* Reward: 1.0 when the guess is correct, else 0.0.
* Termination: a correct guess; running out of `max_guesses` truncates.
* Difficulty: `high` (numbers are 1..high), `max_guesses` (binary search needs
  ceil(log2(high + 1)) guesses).
* Oracle: binary search over the range still consistent with the hints.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from .adapter import GymTextEnv


class GuessNumber(gym.Env[str, int]):
    """Guess a secret integer in [1, high]; each wrong guess is answered higher/lower."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, high: int = 100, max_guesses: int | None = None) -> None:
        self.high = high
        self.max_guesses = max_guesses or math.ceil(math.log2(high + 1))
        # Discrete's elements are np.int64, which act as the env's int actions.
        self.action_space = gym.spaces.Discrete(high, start=1)  # type: ignore[assignment]
        self.observation_space = gym.spaces.Text(200)
        self.render_mode = "ansi"
        self.secret, self.lo, self.hi, self.guesses = 0, 1, high, 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.lo, self.hi, self.guesses = 1, self.high, 0
        return self.render(), {}

    def step(self, action: int) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.guesses += 1
        guess = int(action)
        if guess == self.secret:
            return f"{guess} is correct!", 1.0, True, False, {}
        if guess < self.secret:
            self.lo, hint = max(self.lo, guess + 1), "higher"
        else:
            self.hi, hint = min(self.hi, guess - 1), "lower"
        left = self.max_guesses - self.guesses
        return f"{guess}: {hint}. {left} guesses left.", 0.0, False, left <= 0, {}

    def render(self) -> str:
        return f"I picked a number from 1 to {self.high}. You have {self.max_guesses} guesses."


class GuessNumberTextEnv(GymTextEnv):
    description = "Guess a hidden number from higher/lower hints; binary-search oracle."

    def __init__(self, high: int = 100, max_guesses: int | None = None) -> None:
        game = GuessNumber(high, max_guesses)
        super().__init__(
            game,
            instructions="Find my number. After each guess I say higher or lower.",
            max_turns=game.max_guesses,
        )
        self.game = game

    def legal_actions(self) -> str:
        return f"an integer from 1 to {self.game.high}"

    def oracle_move(self) -> int:
        return (self.game.lo + self.game.hi) // 2
