"""`games/wordle-v0`: a Wordle-style word game, written as a Gymnasium env.

* Observation: the rules, then after each guess a feedback line, one mark per letter:
  `G` right letter in the right place, `Y` in the word elsewhere, `_` not in the word
  (repeated letters are marked only as often as the secret has them).
* Tools: `act(action)` with a five-letter guess (or `<action>crane</action>`). Any five
  lowercase letters are accepted, so no dictionary is needed.
* Reward: 1.0 when the secret is guessed, else 0.0.
* Termination: a correct guess; using all `max_guesses` truncates.
* Difficulty: `max_guesses`; `words` replaces the built-in list of secrets.
* Oracle: guesses the secret (it reads the env's state): proves the game is winnable and the
  plumbing works, not that a strategy exists.
"""

from __future__ import annotations

import string
from collections import Counter
from typing import Any

import gymnasium as gym

from .adapter import GymTextEnv

WORDS = (
    "apple beach brain bread chair chest cloud crane dance dream earth field flame fruit "
    "ghost glass grape green heart house juice knife laugh lemon light money mouse music "
    "night ocean paint party piano plant queen river robot salad sheep shirt smile snake "
    "spoon storm sugar table tiger toast train water whale world yield zebra"
).split()


def feedback(guess: str, secret: str) -> str:
    """Wordle marks for `guess` against `secret`, e.g. 'GY__G'."""
    marks = ["_"] * len(guess)
    unmatched = Counter(s for g, s in zip(guess, secret, strict=True) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        elif unmatched[g] > 0:
            marks[i], unmatched[g] = "Y", unmatched[g] - 1
    return "".join(marks)


class Wordle(gym.Env[str, str]):
    """Guess a five-letter secret word in `max_guesses` tries."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, max_guesses: int = 6, words: list[str] | None = None) -> None:
        self.words = list(words or WORDS)
        if not all(len(w) == 5 and w.isalpha() and w.islower() for w in self.words):
            raise ValueError("words must be five lowercase letters")
        self.max_guesses = max_guesses
        self.action_space = gym.spaces.Text(5, min_length=5, charset=string.ascii_lowercase)
        self.observation_space = gym.spaces.Text(400)
        self.render_mode = "ansi"
        self.secret, self.guesses = "", 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.secret, self.guesses = self.words[int(self.np_random.integers(len(self.words)))], 0
        return self.render(), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.guesses += 1
        marks, left = feedback(action, self.secret), self.max_guesses - self.guesses
        if action == self.secret:
            return f"{action} {marks}: solved!", 1.0, True, False, {}
        return f"{action} {marks} ({left} guesses left)", 0.0, False, left <= 0, {}

    def render(self) -> str:
        return (
            f"Guess my five-letter word in {self.max_guesses} tries. After each guess I mark "
            "each letter: G = right place, Y = in the word elsewhere, _ = not in the word."
        )


class WordleTextEnv(GymTextEnv):
    description = "Wordle-style word guessing with letter feedback."

    def __init__(self, max_guesses: int = 6, words: list[str] | None = None) -> None:
        self.game = Wordle(max_guesses, words)
        super().__init__(self.game, instructions="Let's play a word game.", max_turns=max_guesses)

    def legal_actions(self) -> str:
        return "any five lowercase letters"

    def oracle_move(self) -> str:
        return self.game.secret
