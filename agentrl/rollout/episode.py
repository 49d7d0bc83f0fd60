"""One multi-turn episode: env <-> engine, recorded token-exact into a `Trajectory`.

Loop: reset the env, render the prompt with the chat template, then per turn
  generate (budget: min(per-turn max_new_tokens, what is left of max_total_tokens))
  -> append the sampled ids verbatim with their logprobs (mask 1)
  -> decode, parse tool calls, `env.astep(assistant message)`
  -> append the observation's fixed-base delta ids (mask 0) if the model will answer it.

Observation tokens never eat the per-turn generation budget but do count against the
episode's `max_total_tokens`. Whatever goes wrong (env raises or returns a malformed step or
a reward that is not a finite number, engine fails, a tool's sandbox fails (`InfraError`), the
episode runs past its wall-clock limit, the rollout's own code raises) ends *this* episode
with a termination reason and `metadata["error"]`; the trajectory recorded so far stays valid
(`traj.validate()` holds). Which reasons are the machine's rather than the policy's:
`agentrl.types.TERMINATION_KIND`. `rollout.max_invalid_tool_calls` invalid calls in a row end
the episode as "invalid_tool_calls".

`metadata["spans"]` holds the episode's seconds by phase: `generate` (awaiting the engine,
once admitted), `queued` (waiting for an engine slot, on engines with the "admission"
feature; 0 elsewhere, where that wait is inside `generate`), `env` (awaiting `env.astep`,
tools and scoring included), `tools` (the tools' own wall time, from their results) and
`reward` (the step that ended the episode: the env's scoring).

`run_episode(resume=snapshot)` continues an episode a checkpoint kept (`rollout.resume`): the
env is restored instead of reset, and the loop goes on at the turn after the snapshot's, the
recorded tokens (ids, logprobs, weight versions) kept as they are; `on_boundary` records each
turn boundary for such a snapshot.

The wall-clock limit is an `EpisodeClock` (clock.py): `rollout.episode_timeout_s` of the
episode's own time, the `queued` time not counted, within an absolute bound of
`rollout.episode_wall_factor` times the timeout, queue included.
"""

from __future__ import annotations

import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import RolloutConfig
from agentrl.engines.base import Engine, SamplingParams
from agentrl.multimodal.rollout import EpisodeImages, PendingImages
from agentrl.rollout.clock import EpisodeClock, EpisodeTimeout
from agentrl.rollout.resume import Boundary, EpisodeSnapshot, boundary, resumed_trajectory
from agentrl.types import InfraError, Message, TerminationReason, ToolResult, Trajectory, Turn


class _EpisodeEnd(Exception):  # noqa: N818 - control flow, not an error
    """Raised inside the loop to stop with a termination reason."""

    def __init__(self, reason: TerminationReason, error: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.error = reason, error


@dataclass
class _State:
    traj: Trajectory
    tools: list[dict[str, Any]]
    budget: int
    images: EpisodeImages
    clock: EpisodeClock
    max_invalid: int | None = None
    invalid_run: int = 0  # invalid tool calls in a row so far
    on_boundary: Callable[[Boundary], None] | None = None

    @property
    def left(self) -> int:
        return self.budget - len(self.traj.prompt_ids) - len(self.traj.response_ids)


async def run_episode(
    env: Any,
    engine: Engine,
    chat: ChatFormat,
    sampling: SamplingParams,
    cfg: RolloutConfig,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    session_id: str | None = None,
    resume: EpisodeSnapshot | None = None,
    on_boundary: Callable[[Boundary], None] | None = None,
) -> Trajectory:
    """Run one episode on `env` (the caller owns and closes it), or continue `resume` (a
    resumable snapshot) on a fresh `env`. Never raises for env, engine or timeout failures;
    those end the episode with a reason in `traj.termination`."""
    if resume is not None:
        traj = resumed_trajectory(resume)
    else:
        traj = Trajectory(prompt_ids=[], env_id=getattr(env, "spec_id", "") or "")
        traj.metadata.update({"seed": seed, "error": None})
        traj.metadata["spans"] = dict.fromkeys(SPANS, 0.0)
    t0 = time.monotonic()
    clock = EpisodeClock(cfg.episode_timeout_s, wall_factor=cfg.episode_wall_factor)
    try:
        start = _Start(seed, options, session_id, resume, on_boundary)
        await clock.run(_loop(env, engine, chat, sampling, cfg, traj, start, clock))
    except _EpisodeEnd as end:
        traj.termination = end.reason
        traj.metadata["error"] = end.error
    except EpisodeTimeout as e:
        traj.termination = "timeout"
        traj.metadata["error"] = str(e)
    except Exception as e:  # noqa: BLE001 - the rollout's own bug ends this episode only
        traj.termination = "agent_crash"
        traj.metadata["error"] = f"rollout: {error_text(e)}"
        _cut_to_turns(traj)
    traj.metadata["spans"] = {k: round(v, 4) for k, v in traj.metadata["spans"].items()}
    traj.reward = sum(t.reward for t in traj.turns)
    traj.metadata["turns"] = len(traj.turns)
    traj.metadata["wall_s"] = round(time.monotonic() - t0, 4)
    return traj


# The phases `metadata["spans"]` times, in seconds (see the module docstring).
SPANS = ("generate", "queued", "env", "tools", "reward")


def _cut_to_turns(traj: Trajectory) -> None:
    """After a crash between appending tokens and recording their turn, drop the tokens no
    turn covers, so the trajectory stays valid for the viewer."""
    end = traj.turns[-1].obs_end if traj.turns else 0
    if len(traj.response_ids) != end:
        del traj.response_ids[end:], traj.loss_mask[end:], traj.logprobs[end:]
        del traj.weight_versions[end:]


def _span(traj: Trajectory, name: str, since: float) -> float:
    """Add the seconds since `since` to `metadata["spans"][name]`; returns now."""
    now = time.monotonic()
    traj.metadata["spans"][name] += now - since
    return now


def error_text(e: BaseException) -> str:
    """One line (at most 2000 chars) naming an exception, as recorded in `metadata["error"]`."""
    tb = traceback.format_exception_only(type(e), e)
    return "".join(tb).strip()[-2000:]


@dataclass
class _Start:
    """How the episode starts: reset with `seed`/`options`, or continue `resume`."""

    seed: int | None
    options: dict[str, Any] | None
    session_id: str | None
    resume: EpisodeSnapshot | None
    on_boundary: Callable[[Boundary], None] | None


async def _loop(
    env: Any,
    engine: Engine,
    chat: ChatFormat,
    sampling: SamplingParams,
    cfg: RolloutConfig,
    traj: Trajectory,
    start: _Start,
    clock: EpisodeClock,
) -> None:
    images = EpisodeImages(getattr(chat, "vision", None), traj)
    invalid = cfg.max_invalid_tool_calls
    if start.resume is None:
        tools = await _reset(env, chat, traj, images, start)
        state = _State(traj, tools, cfg.max_total_tokens, images, clock, invalid)
    else:
        await _restore(env, start.resume)
        tools = list(start.resume.tools)
        state = _State(traj, tools, cfg.max_total_tokens, images, clock, invalid)
        state.invalid_run = start.resume.invalid_run
    state.on_boundary = start.on_boundary
    if state.left <= 0:
        raise _EpisodeEnd("max_tokens", f"prompt has {len(traj.prompt_ids)} tokens")
    limit = turn_limit(env, cfg)
    for turn_no in range(len(traj.turns), limit):
        last = turn_no == limit - 1
        if await _turn(env, engine, chat, sampling, state, turn_no, last, start.session_id):
            return


async def _reset(
    env: Any, chat: ChatFormat, traj: Trajectory, images: EpisodeImages, start: _Start
) -> list[dict[str, Any]]:
    """Reset the env and render the prompt into `traj`; returns the tool schemas."""
    try:
        obs, info = await env.areset(seed=start.seed, options=start.options)
    except InfraError as e:
        raise _EpisodeEnd(e.reason, f"reset: {error_text(e)}") from e
    except Exception as e:  # noqa: BLE001 - any env failure ends this episode only
        raise _EpisodeEnd("env_error", f"reset: {error_text(e)}") from e
    traj.messages = list(obs.messages)
    traj.metadata["reset_info"] = _jsonable(info)
    if obs.tools:  # the schemas the prompt rendered: `agentrl view --diff` re-renders with them
        traj.metadata["tools"] = _jsonable(list(obs.tools))
    ids = chat.prompt_ids(obs.messages, obs.tools)
    traj.prompt_ids, pending = _expand_images(images, obs.messages, ids, 0)
    images.commit(pending)
    return list(obs.tools)


async def _restore(env: Any, snap: EpisodeSnapshot) -> None:
    """Put a fresh env into the snapshot's state (a `ResumableEnv`; else env_error)."""
    try:
        env.restore(snap.env_state)
    except Exception as e:  # noqa: BLE001 - a failing restore ends this episode only
        raise _EpisodeEnd("env_error", f"restore: {error_text(e)}") from e


def env_turn_limit(env: Any) -> int:
    """The env's own `max_turns` (declared by `AgentEnv`); an env without one ends as
    env_error naming the attribute."""
    try:
        return int(env.max_turns)
    except (AttributeError, TypeError, ValueError) as e:
        raise _EpisodeEnd("env_error", f"{type(env).__name__}.max_turns: {error_text(e)}") from e


def turn_limit(env: Any, cfg: RolloutConfig) -> int:
    """The episode's turn limit: `rollout.max_turns` when set, else the env's `max_turns`."""
    return cfg.max_turns if cfg.max_turns is not None else env_turn_limit(env)


async def _generate(
    engine: Engine,
    chat: ChatFormat,
    sampling: SamplingParams,
    state: _State,
    session_id: str | None,
) -> Any:
    limit = min(sampling.max_new_tokens, state.left)
    params = SamplingParams(
        max_new_tokens=limit,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        stop_token_ids=sorted(set(sampling.stop_token_ids) | set(chat.stop_token_ids)),
        stop=list(sampling.stop),
        # A seeded run gives every turn its own stream (set per episode by run_groups).
        seed=None if sampling.seed is None else sampling.seed + 7919 * len(state.traj.turns),
    )
    mm = state.images.payload(engine)  # every image so far; text-only engines never see it
    extra = {"multimodal": mm} if mm else {}
    clock, spans = state.clock, state.traj.metadata["spans"]
    t0, q0 = time.monotonic(), clock.queued_s
    if "admission" in engine.features:  # the clock stops until the engine admits the request
        params.on_admit = clock.admit
        clock.queue()
    try:
        out = await engine.generate(state.traj.input_ids, params, session_id=session_id, **extra)
    except Exception as e:  # noqa: BLE001 - recorded on the trajectory
        raise _EpisodeEnd("engine_error", error_text(e)) from e
    finally:
        clock.admit()  # a request that ended unadmitted (refused, aborted) stops the wait too
        queued = clock.queued_s - q0
        spans["queued"] += queued
        spans["generate"] += time.monotonic() - t0 - queued
    if out.finish_reason in ("error", "abort"):
        raise _EpisodeEnd("engine_error", out.error or f"engine finished with {out.finish_reason}")
    if len(out.logprobs) != len(out.token_ids) or len(out.token_ids) > limit:
        raise _EpisodeEnd("engine_error", "engine returned malformed ids/logprobs")
    return out, limit


async def _turn(
    env: Any,
    engine: Engine,
    chat: ChatFormat,
    sampling: SamplingParams,
    state: _State,
    turn_no: int,
    last: bool,
    session_id: str | None,
) -> bool:
    """One generate + env step. Returns True when the episode ended normally."""
    traj = state.traj
    out, limit = await _generate(engine, chat, sampling, state, session_id)
    start = len(traj.response_ids)
    versions = list(out.weight_versions) if len(out.weight_versions) == len(out.token_ids) else None
    traj.append(list(out.token_ids), trained=True, logprobs=list(out.logprobs), versions=versions)
    text = chat.sampled_text(out.token_ids)
    content, calls = chat.parse(text, state.tools)
    for i, c in enumerate(calls):
        c.id = c.id or f"call_{turn_no}_{i}"
    turn = Turn(
        start=start,
        end=len(traj.response_ids),
        obs_end=len(traj.response_ids),
        text=text,
        tool_calls=calls,
        finish_reason=out.finish_reason,
    )
    traj.turns.append(turn)
    action = Message("assistant", content, tool_calls=calls)
    traj.messages.append(action)
    if out.finish_reason == "length":
        raise _EpisodeEnd("overlong" if limit == sampling.max_new_tokens else "max_tokens")
    t0 = time.monotonic()
    try:  # a step that raises or returns something malformed ends this episode only
        obs, reward, terminated, truncated, info = _step_result(env, await env.astep(action))
    except _EpisodeEnd:
        raise
    except InfraError as e:  # a sandbox or a tool's service failed: the machine's failure
        raise _EpisodeEnd(e.reason, f"step: {error_text(e)}") from e
    except Exception as e:  # noqa: BLE001 - any env failure ends this episode only
        raise _EpisodeEnd("env_error", f"step: {error_text(e)}") from e
    finally:
        step_s = _span(traj, "env", t0) - t0
    turn.reward = reward
    turn.tool_results = _tool_results(info, obs.messages)
    traj.metadata["spans"]["tools"] += sum(r.wall_s for r in turn.tool_results)
    traj.messages += obs.messages
    if terminated or truncated:
        traj.metadata["spans"]["reward"] += step_s
        # An env truncating at its own turn limit ends like the rollout's limit: one name.
        at_limit = truncated and turn_no + 1 >= env_turn_limit(env)
        traj.termination = "done" if terminated else "max_turns" if at_limit else "truncated"
        return True
    _count_invalid_calls(state, turn)
    if last:  # nothing will answer this observation: keep its messages, not its tokens
        raise _EpisodeEnd("max_turns")
    ids = chat.observation_ids(obs.messages, state.tools, sampled_ids=out.token_ids)
    ids, pending = _expand_images(state.images, obs.messages, ids, len(traj.input_ids))
    if len(ids) >= state.left:  # no room left for the observation plus one sampled token
        raise _EpisodeEnd("max_tokens")
    traj.append(ids, trained=False)
    state.images.commit(pending)
    turn.obs_end = len(traj.response_ids)
    if state.on_boundary is not None:  # a checkpoint can continue the episode from here
        state.on_boundary(boundary(env, traj, state.tools, state.invalid_run))
    return False


def _count_invalid_calls(state: _State, turn: Turn) -> None:
    """Count the turn's calls in order: an invalid one (unparsable, or answered by a result
    marked `invalid`: unknown tool, arguments off the schema) extends the run, a valid one
    resets it; `rollout.max_invalid_tool_calls` in a row end the episode."""
    invalid = {r.call_id for r in turn.tool_results if r.invalid}
    for call in turn.tool_calls:
        bad = call.parse_error is not None or call.id in invalid
        state.invalid_run = state.invalid_run + 1 if bad else 0
    if state.max_invalid is not None and state.invalid_run >= state.max_invalid:
        raise _EpisodeEnd("invalid_tool_calls", f"{state.invalid_run} invalid tool calls in a row")


def _step_result(env: Any, out: Any) -> tuple[Any, float, bool, bool, Any]:
    """`env.astep`'s result checked against the step contract, the reward as a float. A
    malformed result, or a reward that is not a finite real number (NaN, inf, None, a string),
    ends the episode as env_error naming the env and the value: never a crash of the whole
    run, never a NaN reward that turns every weight into NaN."""
    name = _env_name(env)
    if not (isinstance(out, (tuple, list)) and len(out) == 5):
        raise _EpisodeEnd(
            "env_error",
            f"step: env {name} returned {_short(out)}; expected a 5-tuple "
            "(Observation, reward, terminated, truncated, info)",
        )
    obs, reward, terminated, truncated, info = out
    messages = getattr(obs, "messages", None)
    if not (isinstance(messages, list) and all(isinstance(m, Message) for m in messages)):
        raise _EpisodeEnd(
            "env_error",
            f"step: env {name} returned observation {_short(obs)}; expected an Observation "
            "whose messages are a list of Message",
        )
    return obs, _finite_reward(name, reward), bool(terminated), bool(truncated), info


def _finite_reward(name: str, reward: Any) -> float:
    bad = reward is None or isinstance(reward, (str, bytes))
    try:
        value = float(reward)
    except (TypeError, ValueError, OverflowError):
        bad = True
    if bad or not math.isfinite(value):
        raise _EpisodeEnd(
            "env_error",
            f"step: env {name} returned reward {_short(reward)}; "
            "a reward must be a finite real number",
        )
    return value


def _env_name(env: Any) -> str:
    """The env's registered id and class (`bad/nan-v0 (MyEnv)`), for error messages."""
    cls = type(env).__name__
    spec_id = getattr(env, "spec_id", "") or ""
    return f"{spec_id} ({cls})" if spec_id else cls


def _short(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.200}"


def _expand_images(
    images: EpisodeImages, messages: list[Message], ids: list[int], base: int
) -> tuple[list[int], PendingImages | None]:
    """Expand image placeholders of an observation (no-op without images); a failure (no
    vision processor, placeholder count mismatch, bad image) ends the episode as env_error."""
    try:
        return images.expand(messages, ids, base)
    except (ValueError, TypeError, OSError) as e:
        raise _EpisodeEnd("env_error", f"images: {error_text(e)}") from e


def _tool_results(info: dict[str, Any], messages: list[Message]) -> list[ToolResult]:
    results = info.get("tool_results") if isinstance(info, dict) else None
    if isinstance(results, list) and all(isinstance(r, ToolResult) for r in results):
        return list(results)
    return [
        ToolResult(m.tool_call_id or "", m.name or "", m.content)
        for m in messages
        if m.role == "tool"
    ]


def _jsonable(info: Any) -> Any:
    try:
        json.dumps(info)
        return info
    except (TypeError, ValueError):
        return repr(info)[:2000]
