"""The environment API: Gymnasium envs whose observations and actions are chat messages.

An agentrl env is a `gymnasium.Env`:

* `reset(seed=, options=) -> (Observation, info)`: the task prompt as chat messages plus the
  OpenAI schemas of the tools the model may call.
* `step(action) -> (Observation, reward, terminated, truncated, info)`: `action` is the model's
  assistant `Message` (text plus tool calls already parsed by the rollout, parse failures
  included as `ToolCall.parse_error`); the observation holds the new messages the env appends
  (tool results, user feedback), never the whole history.

`areset`/`astep` are the async forms the rollout awaits. The defaults run the sync methods in a
daemon worker thread (`tools.workers.in_daemon_thread`) so a slow env never blocks other episodes,
and one that hangs past the episode timeout never holds the process at exit; async envs
override them instead.

`ToolEnv` covers the common case: a task with a checkable answer and a `ToolSet`. Subclasses
implement `new_task` and `score`, and optionally `oracle_action` so `check_env` can prove the
task is solvable at maximum reward.

`ResumableEnv` is a capability an env declares by subclassing it: its state between two steps
can be saved (`snapshot`) and put back into a fresh instance (`restore`), so a pipelined run's
checkpoint keeps the episodes in flight and `--resume` continues them (docs/async.md,
"Resume"). An env without it is not resumable: its in-flight episodes run again from their
seed, counted and logged. `ResumableToolEnv` is a `ToolEnv` whose whole state is its task,
turn count and RNG (stateless tools, like the calculator envs').

Dataset rows (`data.path`, docs/datasets.md) reach an env as `reset(options={"row": Row})`.
An env type declares that it takes them (`accepts_rows = True`) and implements `read_row`,
which turns one row into its task. The declaration is what config loading checks: `data.path`
with an env that does not take rows is an error, never silently ignored rows.
"""

from __future__ import annotations

import asyncio
import copy
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agentrl.rows import Row, RowError
from agentrl.tools.core import ToolSet
from agentrl.tools.workers import in_daemon_thread
from agentrl.types import Message, ToolResult

# The trainer's held-out eval seeds start here (`data.eval_seed_offset`'s default); its SFT
# demo seeds start at twice it (`agentrl.trainer.data`). An env with a train/held-out split of
# its own (`harbor:family/...`, an ORS env's eval split) poses held-out tasks for these seeds.
HELDOUT_FROM = 1_000_000


def is_heldout_seed(seed: int | None, heldout_from: int = HELDOUT_FROM) -> bool:
    """Whether `seed` is one of the trainer's held-out eval seeds, [heldout_from, 2 *
    heldout_from); training and demo seeds are not."""
    return seed is not None and heldout_from <= seed < 2 * heldout_from


@dataclass
class Observation:
    """What the env shows the model: new messages, and (on reset) the callable tools."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)


class MessagesSpace(gym.Space[Any]):
    """A Gymnasium space of `Observation`s or assistant `Message`s (text, not tensors)."""

    def __init__(self, kind: str, max_chars: int = 200_000, seed: int | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.kind = kind
        self.max_chars = max_chars

    def contains(self, x: Any) -> bool:
        if self.kind == "action":
            return isinstance(x, Message) and x.role == "assistant"
        if not isinstance(x, Observation):
            return False
        size = sum(len(m.content) for m in x.messages)
        return all(isinstance(m, Message) for m in x.messages) and size <= self.max_chars

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        text = "".join(self.np_random.choice(list("abc xyz0123"), size=8))
        msg = Message("assistant", text)
        return msg if self.kind == "action" else Observation([Message("user", text)])

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:  # by value: vector envs compare copies
        return isinstance(other, MessagesSpace) and (self.kind, self.max_chars) == (
            other.kind,
            other.max_chars,
        )

    def __hash__(self) -> int:
        return hash((type(self), self.kind, self.max_chars))


class AgentEnv(gym.Env[Observation, Message]):
    """Base class for agentrl envs. Subclasses implement `reset` and `step`.

    Class attributes describe the env for `agentrl envs list` and `check_env`:
    `family`, `description`, `reward_range` (min, max), `max_turns`.
    """

    family: str = "misc"
    description: str = ""
    reward_range: tuple[float, float] = (0.0, 1.0)
    max_turns: int = 8
    max_observation_chars: int = 32_000
    # Whether a dataset row can pose this env's task: reset(options={"row": Row}) then uses
    # `read_row(row)` instead of generating one.
    accepts_rows: ClassVar[bool] = False
    # Row fields read beyond the contract's (prompt, question, answer, data_source,
    # extra_info), so `data.columns` may map them.
    row_fields: ClassVar[tuple[str, ...]] = ()

    observation_space = MessagesSpace("observation")
    action_space = MessagesSpace("action")

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """A float reward (gym.Env types it SupportsFloat); gym's own raises a bare error."""
        raise NotImplementedError(
            _missing(self, "step(action) -> (obs, reward, term, trunc, info)")
        )

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        return await in_daemon_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        return await in_daemon_thread(self.step, action)

    def oracle_action(self) -> Message | None:
        """The gold policy's next action in the current state, or None if the env has none."""
        return None

    def adversaries(self) -> dict[str, list[Message]]:
        """Reward-hacking scripts for the current task (name -> actions), each of which must
        score ``reward_range[0]``; ``check_env`` plays them. Call after ``reset``."""
        return {}

    @classmethod
    def read_row(cls, row: Row) -> Task:
        """The task one dataset row poses, before per-instance settings (a system prompt).

        Pure and cheap: it runs on every row when the dataset loads, so a bad row fails
        (raise `RowError(column, why)`) before training starts, and again at reset.
        """
        raise RowError(None, f"{cls.__name__} does not take dataset rows")


@dataclass
class Task:
    """One problem instance: the prompt messages and whatever `score` needs."""

    messages: list[Message]
    answer: Any = None
    info: dict[str, Any] = field(default_factory=dict)


class ToolEnv(AgentEnv):
    """A task answered in a final message, with tools available along the way.

    Each step: if the assistant called tools, run them (concurrently, each with its own
    timeout) and return their results; otherwise score the final message and terminate.
    Exceeding `max_turns` truncates with reward `reward_range[0]`.
    """

    def __init__(self, tools: ToolSet | None = None, max_turns: int | None = None) -> None:
        self.tools = tools or ToolSet()
        if max_turns is not None:
            self.max_turns = max_turns
        self.task: Task | None = None
        self.turn = 0

    # -- hooks -------------------------------------------------------------------------
    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        """A fresh task; `options["row"]` (only if `accepts_rows`) is a dataset row to pose."""
        raise NotImplementedError(_missing(self, "new_task(rng, options) -> Task"))

    def score(self, final: Message) -> float:
        """The reward of the final message (one without tool calls), for `self.task`."""
        raise NotImplementedError(_missing(self, "score(final) -> float"))

    # -- gym API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self.tools.reset()
        self.turn = 0
        options = options or {}
        if "row" in options and not self.accepts_rows:  # never ignore a dataset row silently
            raise RowError(None, f"{type(self).__name__} does not take dataset rows")
        self.task = self.new_task(self.np_random, options)
        return Observation(list(self.task.messages), self.tools.schemas), dict(self.task.info)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """`astep` is what the rollout and the trainer call, and `step` runs it, so both see
        one env. A subclass that overrides `step` alone would train on another reward than
        `env.step` and `check_env` show: refuse it when the class is defined."""
        super().__init_subclass__(**kwargs)
        step, astep = _owner(cls, "step"), _owner(cls, "astep")
        if step is not ToolEnv and step is not astep:
            which = (
                f"{cls.__qualname__} overrides step() without astep()"
                if step is cls
                else f"{cls.__qualname__} overrides astep() but inherits step() from "
                f"{step.__qualname__}"
            )
            raise TypeError(
                f"{which}: the rollout and the trainer call astep(), env.step() and check_env "
                "call step(), so they would disagree. Override score(final) for the final "
                "reward, or astep() alone to change what a step returns (ToolEnv.step() runs "
                "it); see docs/write-an-env.md"
            )

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        # nothing to run: skip starting an event loop (~15x faster), unless a subclass's
        # astep has its say on final messages too
        if not action.tool_calls and _owner(type(self), "astep") is ToolEnv:
            return self._finish(action)
        return _run(self.astep(action))

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if not action.tool_calls:  # score() may be slow (a judge, a sandbox): off the loop
            return await in_daemon_thread(self._finish, action)
        if self.task is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        results = await asyncio.gather(*(self.tools.acall(c) for c in action.tool_calls))
        obs = Observation([tool_message(r) for r in results])
        truncated = self.turn >= self.max_turns
        info = {"tool_results": results, "tool_errors": sum(r.is_error for r in results)}
        return obs, self.reward_range[0], False, truncated, info

    def _finish(self, final: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Score a message without tool calls; it ends the episode."""
        if self.task is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        score = self.score(final)
        # A number becomes a float; anything else (None, a string) goes out as is, for the
        # rollout and check_env to name as a bad reward instead of a bare TypeError here.
        reward = float(score) if isinstance(score, numbers.Real) else score
        return Observation([]), reward, True, False, {"answer": self.task.answer}

    def close(self) -> None:
        self.tools.close()


class ResumableEnv(ABC):
    """Capability: the env's state after `reset` or a step can be saved and restored.

    `snapshot()` is called between two steps (never during one) and returns a picklable value
    (it goes into a checkpoint, and from a rollout process to the trainer). `restore(state)`
    is called on a fresh instance from the same factory, never reset, and leaves it as the
    snapshotted env was: the next `astep` returns what the original's would have.
    """

    @abstractmethod
    def snapshot(self) -> Any:
        """The env's state now, as a picklable value."""

    @abstractmethod
    def restore(self, state: Any) -> None:
        """Become the env `state` was taken from (this instance was never reset)."""


def tool_message(r: ToolResult) -> Message:
    """The chat message that shows the model one tool result."""
    return Message("tool", r.content, tool_call_id=r.call_id or None, name=r.name)


def _missing(env: AgentEnv, method: str) -> str:
    return f"{type(env).__qualname__} must implement {method} (see docs/write-an-env.md)"


def _owner(cls: type, name: str) -> type:
    """The class of `cls`'s MRO that defines attribute `name`."""
    return next(c for c in cls.__mro__ if name in vars(c))


def _run(coro: Any) -> Any:
    from agentrl.tools.core import run_sync

    return run_sync(coro)


class ResumableToolEnv(ToolEnv, ResumableEnv):
    """A `ToolEnv` whose state is its task, turn count and RNG: resumable as is. Only for
    tool sets without per-episode state (`ToolSet.reset` does nothing)."""

    def snapshot(self) -> dict[str, Any]:
        return {
            "task": copy.deepcopy(self.task),
            "turn": self.turn,
            "rng": self.np_random.bit_generator.state,
        }

    def restore(self, state: Any) -> None:
        self.tools.reset()
        self.task, self.turn = copy.deepcopy(state["task"]), int(state["turn"])
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
        self.np_random = rng
