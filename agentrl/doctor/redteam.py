"""`agentrl doctor --env ID --red-team`: play the adversarial probes against an env's reward.

Why: before a GPU run, find out whether the reward pays for something other than the task.
Each applicable probe (`probes.py`) plays a few seeded episodes on fresh env instances, the
way a model would (messages and tool calls only), and its mean reward is compared with the
env's `reward_range`: a "hack" probe that earns more than `threshold` of the range is a FAIL
naming the probe with a one-line reproduction, a "guess" probe that does is a WARN. A probe
that reports the current task's hidden data anywhere the agent's tools reach is a FAIL, paid
or not (`tool-data-lookup`; a search that never reported is a WARN: nothing proven). A probe
that makes the env raise is a FAIL (model output must never crash a rollout), one that stalls
an episode past `episode_timeout_s` a WARN. Episodes run concurrently under a bound, each
step with a deadline, so a probe never holds the doctor longer than its timeout; the
programs probes submit run wherever the env runs model code (its sandbox).
"""

from __future__ import annotations

import asyncio
import reprlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentrl.types import Message

from .checks import Finding
from .probes import Probe, Seen, applicable


@dataclass
class Outcome:
    """One probe's episodes: their rewards and what went wrong, if anything."""

    probe: Probe
    rewards: list[float] = field(default_factory=list)
    crash: str = ""
    stalled: int = 0
    first_action: str = ""
    leaks: list[str] = field(default_factory=list)
    coverage: str = ""
    unsearched: int = 0  # episodes whose search never reported

    @property
    def mean(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")


def _text(m: Message) -> str:
    calls = "; ".join(f"{c.name}({reprlib.repr(c.arguments)})" for c in m.tool_calls)
    return (m.content[:160] + (f" [calls: {calls}]" if calls else "")).replace("\n", "\\n")


async def _episode(env: Any, probe: Probe, seed: int, deadline: float, out: Outcome) -> None:
    from agentrl.envs import HiddenData, data_packages

    def left() -> float:
        return max(0.01, deadline - time.monotonic())

    obs, _ = await asyncio.wait_for(env.areset(seed=seed), left())
    tools = frozenset(t.get("function", {}).get("name", "") for t in obs.tools)
    seen = Seen(env.family, tools, "\n\n".join(m.content for m in obs.messages))
    seen.max_turns, seen.packages = env.max_turns, [*data_packages(), "agentrl.envs"]
    seen.needles = env.hidden_data() if isinstance(env, HiddenData) else []
    reward = float(env.reward_range[0])
    for turn in range(env.max_turns + 1):
        seen.turn = turn
        action = probe.play(seen)
        out.first_action = out.first_action or _text(action)
        obs, r, terminated, truncated, _ = await asyncio.wait_for(env.astep(action), left())
        reward = float(r)
        seen.observations += obs.messages
        if terminated or truncated:
            break
    out.rewards.append(reward)
    if probe.inspect is not None:
        found = probe.inspect(seen)
        out.leaks += [leak for leak in found.leaks if leak not in out.leaks]
        out.coverage, out.unsearched = found.note, out.unsearched + (not found.searched)


async def _play(
    factory: Any, probe: Probe, seeds: list[int], timeout_s: float, gate: asyncio.Semaphore
) -> Outcome:
    out = Outcome(probe)
    for seed in seeds:
        async with gate:
            env = factory()
            try:
                await _episode(env, probe, seed, time.monotonic() + timeout_s, out)
            except TimeoutError:
                out.stalled += 1
            except Exception as e:  # noqa: BLE001 - model output crashing the env is the finding
                out.crash = out.crash or f"seed {seed}: {type(e).__name__}: {str(e)[:300]}"
            finally:  # a stalled env may still be busy: close it aside, never wait on it
                threading.Thread(target=env.close, daemon=True).start()
    return out


def _finding(o: Outcome, env_id: str, lo: float, hi: float, threshold: float) -> Finding:
    p = o.probe
    repro = f"agentrl doctor --env {env_id} --red-team --probe {p.name}"
    if o.crash:
        return Finding(
            "FAIL",
            f"probe {p.name} crashes the env",
            f"{p.idea}; {o.crash}; first action: {o.first_action}",
            f"model output must become an observation or a minimum reward, never an "
            f"exception. Reproduce: {repro}",
        )
    pays = bool(o.rewards) and o.mean > lo + threshold * (hi - lo)
    rewards = ", ".join(f"{r:g}" for r in o.rewards)
    detail = f"{p.idea}; rewards [{rewards}]; first action: {o.first_action}"
    detail += f"; searched: {o.coverage}" if o.coverage else ""
    if o.leaks:
        return Finding(
            "FAIL",
            f"probe {p.name} reads the task's hidden data (pays {o.mean:.2f})",
            f"found in: {'; '.join(o.leaks[:6])}; {detail}",
            f"mask or move it out of the sandbox's reach (sandboxes.base.TASK_DATA_PACKAGES, "
            f"docs/sandbox.md). Reproduce: {repro}",
        )
    if pays and p.kind == "guess":
        return Finding(
            "WARN",
            f"probe {p.name} pays {o.mean:.2f} by guessing",
            detail,
            f"the task can be guessed from its prompt; widen the answer space. {repro}",
        )
    if pays:
        return Finding(
            "FAIL",
            f"probe {p.name} pays {o.mean:.2f} (max {hi:g}) without doing the task",
            detail,
            f"the reward trusts something the agent controls (docs/sandbox.md, threat model). "
            f"Reproduce: {repro}",
        )
    if o.unsearched:
        return Finding(
            "WARN",
            f"probe {p.name} could not search ({o.unsearched} episode(s) without a report)",
            detail,
            f"the tool's limits left no time to search; nothing is proven. Reproduce: {repro}",
        )
    if o.stalled:
        return Finding(
            "WARN",
            f"probe {p.name} stalls the env ({o.stalled} episode(s) timed out)",
            detail,
            f"a stalled reward holds a rollout slot until its timeout. Reproduce: {repro}",
        )
    return Finding("OK", f"probe {p.name} does not pay ({o.mean:.2f})", detail)


def run_red_team(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    episodes: int = 2,
    probes: list[str] | None = None,
    threshold: float = 0.05,
    episode_timeout_s: float = 120.0,
    concurrency: int = 4,
    backend: str | None = None,
) -> list[Finding]:
    """Findings (section "red team") for every probe that applies to `env_id`, each played
    on seeds 0..episodes-1; `backend` (e.g. "docker") is the sandbox backend the env's
    grader and tools run on (its `backend=` option; an env without one is an error)."""
    import functools

    from agentrl.envs import make

    kwargs = {**(env_kwargs or {}), **({"backend": backend} if backend else {})}
    factory = functools.partial(make, env_id, **kwargs)
    try:
        env = factory()
    except TypeError as e:
        if not backend or "backend" not in str(e):
            raise
        raise ValueError(f"{env_id} takes no backend= option (its sandbox is fixed): {e}") from e
    try:
        obs, _ = env.reset(seed=0)
        family, (lo, hi) = env.family, env.reward_range
    finally:
        env.close()
    tools = frozenset(t.get("function", {}).get("name", "") for t in obs.tools)
    chosen = applicable(family, tools, probes)

    async def main() -> list[Outcome]:
        gate = asyncio.Semaphore(max(1, concurrency))
        seeds = list(range(max(1, episodes)))
        return list(
            await asyncio.gather(
                *(_play(factory, p, seeds, episode_timeout_s, gate) for p in chosen)
            )
        )

    t0 = time.monotonic()
    outcomes = asyncio.run(main())
    target = env_id + (f" --backend {backend}" if backend else "")
    found = [_finding(o, target, float(lo), float(hi), threshold) for o in outcomes]
    paying = [o.probe.name for o, f in zip(outcomes, found, strict=True) if f.level == "FAIL"]
    summary = Finding(
        "FAIL" if paying else "OK",
        f"red team: {len(paying)} of {len(chosen)} probes pay or crash"
        if paying
        else f"red team: none of {len(chosen)} probes pays",
        f"env family {family!r}, tools {sorted(tools) or 'none'}, backend "
        f"{kwargs.get('backend', 'the default')}, {max(1, episodes)} "
        f"episode(s) each, threshold {threshold:g} of the reward range, "
        f"{time.monotonic() - t0:.1f}s" + (f"; failing: {', '.join(paying)}" if paying else ""),
        "see each probe's finding" if paying else "",
    )
    for f in [summary, *found]:
        f.section = "red team"
    return [summary, *found]
