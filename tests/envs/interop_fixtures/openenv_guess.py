"""An OpenEnv Environment written with openenv-core's own API (Action, Observation, Rubric)."""

import random

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics import Rubric


class GuessAction(Action):
    """Guess the secret number."""

    guess: int


class GuessObservation(Observation):
    hint: str


class Solved(Rubric):
    def forward(self, action, observation):
        return 1.0 if observation.hint == "correct" else 0.0


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    def __init__(self, high: int = 16):
        super().__init__(rubric=Solved())
        self.high = high
        self._state = State(episode_id="0", step_count=0)

    def reset(self, seed=None, episode_id=None, **kw):
        self.secret = random.Random(seed).randint(1, self.high)
        self._state = State(episode_id=episode_id or "0", step_count=0)
        return GuessObservation(hint=f"Guess a number in 1..{self.high}.")

    def step(self, action, timeout_s=None, **kw):
        self._state.step_count += 1
        hint = (
            "correct"
            if action.guess == self.secret
            else ("higher" if action.guess < self.secret else "lower")
        )
        obs = GuessObservation(hint=hint, done=hint == "correct")
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self):
        return self._state
