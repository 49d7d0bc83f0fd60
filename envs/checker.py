"""`check_env`: prove an env honours the agentrl API before any GPU time is spent on it.

Each `check_*` function tests one property and raises `EnvCheckError` naming the problem:
API shape, seeding determinism, reward range, valid tool schemas, bounded observations,
graceful handling of bad tool calls, (when the env has an oracle) that the gold policy
reaches the maximum reward without a tool error, and (when it declares `ResumableEnv` and has
an oracle) that a pickled snapshot taken mid-episode restores the step that follows.
"""

from __future__ import annotations

import pickle
from typing import Any, NoReturn

import gymnasium as gym
import jsonschema

from agentrl.types import Message, ToolCall, ToolResult

from .core import AgentEnv, Observation, ResumableEnv


class EnvCheckError(AssertionError):
    """An env broke the API contract; the message says how."""


def _fail(env: Any, msg: str) -> NoReturn:
    raise EnvCheckError(f"{getattr(env, 'spec_id', type(env).__name__)}: {msg}")


def check_reset(env: AgentEnv, seed: int) -> Observation:
    out = env.reset(seed=seed)
    if not (isinstance(out, tuple) and len(out) == 2):
        _fail(env, f"reset() must return (Observation, info), got {type(out).__name__}")
    obs, info = out
    if not isinstance(obs, Observation):
        _fail(env, f"reset() observation must be an Observation, got {type(obs).__name__}")
    if not isinstance(info, dict):
        _fail(env, "reset() info must be a dict")
    if not obs.messages:
        _fail(env, "reset() returned no prompt messages")
    check_messages(env, obs)
    return obs


def check_messages(env: AgentEnv, obs: Observation) -> None:
    for m in obs.messages:
        if not isinstance(m, Message) or m.role not in ("system", "user", "tool", "assistant"):
            _fail(env, f"observation holds a bad message: {m!r:.200}")
        if not isinstance(m.content, str):
            _fail(env, f"message content must be str, got {type(m.content).__name__}")
    size = sum(len(m.content) for m in obs.messages)
    if size > env.max_observation_chars:
        _fail(
            env,
            f"observation is {size} chars, over max_observation_chars={env.max_observation_chars}",
        )


def check_tool_schemas(env: AgentEnv, obs: Observation) -> None:
    names = set()
    for schema in obs.tools:
        fn = schema.get("function", {}) if schema.get("type") == "function" else {}
        name = fn.get("name")
        if not name or not fn.get("description"):
            _fail(env, f"tool schema needs type=function, a name and a description: {schema}")
        if name in names:
            _fail(env, f"duplicate tool name {name!r}")
        names.add(name)
        try:
            jsonschema.Draft202012Validator.check_schema(fn.get("parameters", {}))
        except jsonschema.SchemaError as e:
            _fail(env, f"tool {name!r} parameters are not valid JSON Schema: {e.message}")


def check_determinism(env: AgentEnv, seed: int) -> None:
    a = env.reset(seed=seed)[0]
    b = env.reset(seed=seed)[0]
    if [m.content for m in a.messages] != [m.content for m in b.messages]:
        _fail(env, f"reset(seed={seed}) twice gave different prompts: seeding is not deterministic")


def check_step(env: AgentEnv, action: Message) -> tuple[Observation, float, bool, bool]:
    return _checked_step(env, action)[:4]


def _checked_step(
    env: AgentEnv, action: Message
) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
    out = env.step(action)
    if not (isinstance(out, tuple) and len(out) == 5):
        _fail(env, "step() must return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, Observation):
        _fail(env, f"step() observation must be an Observation, got {type(obs).__name__}")
    check_messages(env, obs)
    lo, hi = env.reward_range
    if not isinstance(reward, (int, float)) or not lo - 1e-9 <= reward <= hi + 1e-9:
        _fail(env, f"reward {reward!r} outside reward_range {env.reward_range}")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        _fail(env, "terminated and truncated must be bools")
    if not isinstance(info, dict):
        _fail(env, "step() info must be a dict")
    return obs, float(reward), terminated, truncated, info


def check_bad_tool_call(env: AgentEnv, seed: int) -> None:
    """A malformed call must come back as an observation, never an exception."""
    obs = env.reset(seed=seed)[0]
    if not obs.tools:
        return
    bad = ToolCall("no_such_tool_xyz", {}, id="check-1", parse_error="unparsable JSON")
    try:
        check_step(env, Message("assistant", "<tool_call>{oops", tool_calls=[bad]))
    except EnvCheckError:
        raise
    except Exception as e:  # noqa: BLE001
        _fail(env, f"a malformed tool call raised {type(e).__name__}: {e} (must be an observation)")


def check_oracle(env: AgentEnv, seed: int) -> bool:
    """Run the gold policy; it must reach reward_range[1] without a tool error (the env's own
    gold calls failing means a broken tool or schema). Returns False if no oracle."""
    env.reset(seed=seed)
    action = env.oracle_action()
    if action is None:
        return False
    for _ in range(env.max_turns + 1):
        _, reward, terminated, truncated, info = _checked_step(env, action)
        _check_tool_errors(env, info, seed)
        if terminated or truncated:
            if abs(reward - env.reward_range[1]) > 1e-6:
                _fail(
                    env,
                    f"oracle scored {reward} on seed {seed}, expected max {env.reward_range[1]}",
                )
            return True
        action = env.oracle_action()
        if action is None:
            _fail(env, "oracle_action() returned None mid-episode")
    _fail(env, f"oracle did not finish within max_turns={env.max_turns}")
    return True


def _check_tool_errors(env: AgentEnv, info: dict[str, Any], seed: int) -> None:
    """Fail on an oracle step whose tools failed, naming the first failure (`ToolEnv` steps
    report `tool_errors` and `tool_results`)."""
    results = info.get("tool_results") or []
    failed = [r for r in results if isinstance(r, ToolResult) and r.is_error]
    if not (failed or info.get("tool_errors")):
        return
    first = f"{failed[0].name}: {failed[0].content[:300]}" if failed else "no tool_results"
    count = max(len(failed), int(info.get("tool_errors") or 0))
    _fail(env, f"oracle's tool calls failed on seed {seed} ({count} error(s)); first: {first}")


def check_adversaries(env: AgentEnv, seed: int) -> list[str]:
    """Play each of the env's reward-hacking scripts; every one must score the minimum."""
    env.reset(seed=seed)
    names = list(env.adversaries())
    for name in names:
        env.reset(seed=seed)
        script = env.adversaries()[name]
        reward, done = env.reward_range[0], False
        for action in script:
            _, reward, terminated, truncated = check_step(env, action)
            if done := terminated or truncated:
                break
        if not done:
            _fail(env, f"adversary {name!r} did not end the episode on seed {seed}")
        if abs(reward - env.reward_range[0]) > 1e-6:
            _fail(
                env, f"adversary {name!r} scored {reward} on seed {seed}: the reward can be gamed"
            )
    return names


def check_resume(env: AgentEnv, seed: int) -> bool:
    """A `ResumableEnv` with an oracle: after the oracle's first step, `snapshot()` pickles,
    and restored (after the episode went on to its end) the env answers the oracle's next
    action as it did the first time. Returns whether it was checked."""
    if not isinstance(env, ResumableEnv):
        return False
    env.reset(seed=seed)
    action = env.oracle_action()
    if action is None or any(_checked_step(env, action)[2:4]):
        return False  # no oracle, or a one-step episode: no boundary to resume from
    try:
        saved = pickle.loads(pickle.dumps(env.snapshot()))
    except Exception as e:  # noqa: BLE001 - named in the error
        _fail(env, f"snapshot() must return a picklable value: {type(e).__name__}: {e}")
    nxt = env.oracle_action()
    if nxt is None:
        return False
    first = _checked_step(env, nxt)[1:4]
    env.restore(saved)
    again = _checked_step(env, nxt)[1:4]
    if again != first:
        _fail(env, f"restore(snapshot()) then the same action gave {again}, not {first}")
    return True


def check_env(env: Any, seeds: tuple[int, ...] = (0, 1, 2)) -> dict[str, Any]:
    """Validate `env`; raises `EnvCheckError` on the first broken contract.

    Returns a small report: {'oracle': bool, 'tools': [names], 'adversaries': [names]}.
    """
    if not isinstance(env, gym.Env):
        _fail(env, "envs must subclass gymnasium.Env (use agentrl.envs.AgentEnv)")
    if not isinstance(env, AgentEnv):
        _fail(env, "envs must subclass agentrl.envs.AgentEnv to expose areset/astep")
    lo, hi = env.reward_range
    if not lo < hi:
        _fail(env, f"reward_range {env.reward_range} must be (min, max) with min < max")
    obs = check_reset(env, seeds[0])
    check_tool_schemas(env, obs)
    check_determinism(env, seeds[0])
    check_bad_tool_call(env, seeds[0])
    env.reset(seed=seeds[0])
    check_step(env, Message("assistant", "I am not sure."))
    has_oracle = all(check_oracle(env, s) for s in seeds)
    adversaries = check_adversaries(env, seeds[0])
    check_resume(env, seeds[0])
    tools = [t["function"]["name"] for t in obs.tools]
    return {"oracle": has_oracle, "tools": tools, "adversaries": adversaries}
