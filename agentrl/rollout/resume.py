"""Episodes that outlive their process: the state a checkpoint keeps of an episode in flight.

Why: a pipelined run (`trainer.async`) always has episodes running when it writes a
checkpoint. Dropping them and running their prompts again wastes their decode and tool time
and, for an env with side effects, runs steps twice. Instead the runner keeps, for every
episode of a group in flight, where it can be continued from (an `EpisodeBook`), and the
trainer's checkpoint stores that (`agentrl.trainer.inflight`).

What is kept per episode (`EpisodeState`):
- a finished `Trajectory`, verbatim;
- an `EpisodeSnapshot` at its last *turn boundary* (an env step answered, its observation
  appended): the trajectory so far (token ids, per-token logprobs and weight versions,
  turns, messages), the tool schemas, the run of invalid tool calls, and the env's own state
  when the env declares `ResumableEnv`. The tokens of a turn still being generated are not
  kept: the resumed episode samples that turn again, with the same per-turn seed;
- None: no turn answered yet, so the episode starts again from its seed (nothing is lost).

A snapshot of an env that is not resumable says so (`resumable` False): the episode is run
again from its seed, and the trainer counts and logs it (`async/resume/reissued`).
Boundaries are recorded as lengths (O(1) per turn, plus the env's `snapshot()`); the copy is
made only when a checkpoint asks (`EpisodeBook.snapshot`, on the runner's loop, so no episode
moves while it is taken).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.envs import ResumableEnv
from agentrl.types import Trajectory


@dataclass
class EpisodeSnapshot:
    """An episode stopped at a turn boundary; `run_episode(resume=...)` continues it."""

    traj: Trajectory  # the trajectory up to the boundary (a copy)
    tools: list[dict[str, Any]]  # the schemas the prompt rendered
    invalid_run: int = 0  # invalid tool calls in a row so far
    resumable: bool = False  # whether `env_state` holds the env's state
    env_state: Any = None  # `ResumableEnv.snapshot()` at the boundary
    env_name: str = ""  # the env's class, for the log line when not resumable
    why: str = ""  # why not resumable (the env lacks the capability, its snapshot failed)

    @property
    def turns(self) -> int:
        return len(self.traj.turns)


EpisodeState = Trajectory | EpisodeSnapshot | None


@dataclass
class Boundary:
    """The live episode's state at its last turn boundary (lengths into `traj`)."""

    traj: Trajectory
    tools: list[dict[str, Any]]
    invalid_run: int
    tokens: int
    turns: int
    messages: int
    resumable: bool
    env_state: Any
    env_name: str
    why: str

    def copy(self) -> EpisodeSnapshot:
        t, n = self.traj, self.tokens
        prefix = Trajectory(
            prompt_ids=list(t.prompt_ids),
            response_ids=t.response_ids[:n],
            loss_mask=t.loss_mask[:n],
            logprobs=t.logprobs[:n],
            weight_versions=t.weight_versions[:n],
            turns=copy.deepcopy(t.turns[: self.turns]),
            messages=copy.deepcopy(t.messages[: self.messages]),
            env_id=t.env_id,
            group_id=t.group_id,
            metadata=copy.deepcopy(t.metadata),
        )
        return EpisodeSnapshot(
            prefix,
            copy.deepcopy(self.tools),
            self.invalid_run,
            self.resumable,
            self.env_state,
            self.env_name,
            self.why,
        )


def boundary(env: Any, traj: Trajectory, tools: list[dict[str, Any]], invalid_run: int) -> Boundary:
    """Record a turn boundary of `env`'s episode: the env's snapshot when it declares
    `ResumableEnv` (a snapshot that raises makes this boundary not resumable, with the
    reason), nothing of the env otherwise. An episode with images is not resumable (the
    processed images are not kept)."""
    name = type(env).__name__
    resumable, state, why = False, None, f"{name} does not declare ResumableEnv"
    if traj.multimodal:
        why = "episodes with images are not resumable"
    elif isinstance(env, ResumableEnv):
        try:
            state, resumable, why = env.snapshot(), True, ""
        except Exception as e:  # noqa: BLE001 - recorded: the episode is re-run instead
            why = f"{name}.snapshot() raised {type(e).__name__}: {e}"[:500]
    return Boundary(
        traj,
        tools,
        invalid_run,
        len(traj.response_ids),
        len(traj.turns),
        len(traj.messages),
        resumable,
        state,
        name,
        why,
    )


def resumed_trajectory(snap: EpisodeSnapshot) -> Trajectory:
    """A fresh copy of the snapshot's trajectory to continue, marked `metadata["resumed"]`
    (the turn and token it continued from)."""
    traj = copy.deepcopy(snap.traj)
    traj.metadata["resumed"] = {"turn": snap.turns, "token": len(traj.response_ids)}
    return traj


@dataclass
class EpisodeBook:
    """Where each episode of the groups in flight can be continued from, by group key and
    sample index. Touched only on the runner's event loop."""

    groups: dict[str, dict[int, Boundary | Trajectory | None]] = field(default_factory=dict)

    def open(self, key: str, n: int) -> None:
        self.groups[key] = dict.fromkeys(range(n))

    def marker(self, key: str, k: int) -> Callable[[Boundary], None]:
        def mark(b: Boundary) -> None:
            if key in self.groups:
                self.groups[key][k] = b

        return mark

    def finish(self, key: str, k: int, traj: Trajectory) -> None:
        if key in self.groups:
            self.groups[key][k] = traj

    def close(self, key: str) -> None:
        self.groups.pop(key, None)

    def snapshot(self) -> dict[str, list[EpisodeState]]:
        """A copy of every group in flight: per sample, its finished trajectory, its last
        boundary, or None."""
        return {
            key: [_copy(samples[k]) for k in sorted(samples)]
            for key, samples in self.groups.items()
        }


def _copy(entry: Boundary | Trajectory | None) -> EpisodeState:
    if isinstance(entry, Boundary):
        return entry.copy()
    return copy.deepcopy(entry)
