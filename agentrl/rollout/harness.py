"""Harness episodes: an agent program, unchanged, runs one task against the recording gateway.

Per episode: the env poses the task (`env.areset`), a fresh gateway session is opened, the
user's agent runs in a child process (a `module:function` through `agent_child`, or a command
line) with only the session's base URL, a dummy key and the task; its wait is bounded by
`rollout.harness.timeout_s`, after which the process group is killed. With
`rollout.harness.sandbox: local` the command runs in bubblewrap (`sandboxes/command.py`): its
own tmpfs `/work`, the runtime read-only, and a private network whose loopback reaches only
the gateway's port; the result file comes back through the sandbox's launcher. Meanwhile the
env's own tools are served to it at `task["tools_url"]` (`env_tools`: an env graded on its own
state, such as the SWE env's workspace, sees what the agent did there). The answer is scored
by the env's grader (`env.astep` on a final assistant message), the reward the program
returned, or a reward function; the session's recorded segments, token-exact from the
training engine, are the episode's trajectories, each carrying the episode's reward.

An agent that crashes, hangs, calls no model or whose request failed in the engine is an
infrastructure failure (`termination` agent_crash / timeout / engine_error, `metadata
["infra_failure"]`), never a zero reward: it is returned apart from the trained episodes.
A harness that rewrites its history splits the session into several segments; they stay one
episode (`metadata["episode"]`, `metadata["episode_segments"]`) for the advantage.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from agentrl.config.schema import HarnessConfig
from agentrl.rollout import agent_child
from agentrl.rollout.agent_child import load_callable
from agentrl.rollout.env_tools import tools_url
from agentrl.rollout.episode import error_text
from agentrl.rollout.gateway_host import GatewayHost, anthropic_base_url, base_url
from agentrl.rollout.runner import EpisodeHook, TaskSpec, task_args
from agentrl.rollout.warm_parent import RUN_BY_PATH, ParentError, WarmParent
from agentrl.sandboxes.command import RESULT_MAX, RESULT_PATH, command_box, unavailable
from agentrl.types import Message, TerminationReason, Trajectory, TrajectoryGroup

KILL_WAIT_S = 10.0  # a killed agent's exit and pipes, reaped before its task ends
STDERR_TAIL = 2000  # characters of a failed agent's stderr kept in metadata["error"]
EXCEPTION_LINE = 400  # characters of its exception line in the error's first line
# How a `module:function` agent is started: `agent_child.py` run by its path, so the child
# imports only the standard library and the user's module. `-m agentrl.rollout.agent_child`
# would import the `agentrl.rollout` package first (torch, the engines): about 230 MB and 2 s
# of CPU per episode, 16 agents at once on a small box. `-c` keeps the working directory
# first on sys.path, as `-m` does. With `rollout.harness.preload`, runs are forked from a warm
# parent instead (`warm_parent`), which starts the same way.
AGENT_CHILD = [*RUN_BY_PATH, agent_child.__file__]


@dataclass
class Episode:
    """One agent run: its trained segments, or (`failure` set) why it is not trained."""

    segments: list[Trajectory]
    record: Trajectory  # the episode's summary row (the failure's record when it failed)
    failure: TerminationReason | None = None  # an infra termination reason
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgentRun:
    status: str  # "ok", "crash", "timeout"
    result: dict[str, Any]
    error: str = ""


def task_json(obs: Any, seed: int | None, env_id: str) -> dict[str, Any]:
    """What the agent is given: the env's prompt (last user message), the whole message list,
    the env's tool schemas (for information: the agent brings its own tools) and the seed."""
    messages = [m.to_chat() for m in obs.messages]
    prompt = next((m.content for m in reversed(obs.messages) if m.role == "user"), "")
    return {
        "prompt": prompt,
        "messages": messages,
        "tools": list(obs.tools),
        "seed": seed,
        "env": env_id,
    }


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the agent's children too
    except (ProcessLookupError, PermissionError):
        pass


def base_env() -> dict[str, str]:
    """The trainer's environment as an agent may see it (the gateway's admin settings out)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTRL_SERVE")}


def warm_parent(cfg: HarnessConfig) -> WarmParent | None:
    """The warm parent `rollout.harness.preload` asks for (started by its first run)."""
    if not cfg.preload:  # HarnessConfig allows it only with `agent`
        return None
    return WarmParent(cfg.preload, base_env(), os.getcwd(), agent_child.__file__, KILL_WAIT_S)


async def run_agent(
    cfg: HarnessConfig,
    task: dict[str, Any],
    root: str,
    session: str,
    parent: WarmParent | None = None,
) -> AgentRun:
    """Run the agent program once (forked from `parent` if given); never raises for what the
    program does."""
    given = {
        "AGENTRL_TASK": json.dumps(task),
        "AGENTRL_SESSION": session,
        "AGENTRL_BASE_URL": base_url(root, session),
        "AGENTRL_TOOLS_URL": str(task.get("tools_url", "")),
        "OPENAI_BASE_URL": base_url(root, session),
        "OPENAI_API_KEY": cfg.api_key,
        "ANTHROPIC_BASE_URL": anthropic_base_url(root, session),
        "ANTHROPIC_API_KEY": cfg.api_key,
    }
    if cfg.sandbox == "local":
        port = urlsplit(root).port or 80
        async with command_box(port) as box:
            argv = box.argv(
                cfg.command,
                given | {"AGENTRL_RESULT": RESULT_PATH},
                cfg.readonly_paths,
                cfg.sandbox_disk_mb,
            )
            run, out = await _wait(cfg, argv, {}, "/", box.fds)
            return run if run.status != "ok" else _parsed(box.result_bytes, out)
    with tempfile.TemporaryDirectory(prefix="agentrl-agent-") as tmp:
        result_path = os.path.join(tmp, "result.json")
        env = base_env() | given | {"AGENTRL_RESULT": result_path}
        if cfg.agent:
            env["AGENTRL_AGENT"] = cfg.agent
        if cfg.agent and parent is not None:
            run, out = await _forked(cfg, parent, env, tmp)
        else:
            argv = [sys.executable, *AGENT_CHILD] if cfg.agent else list(cfg.command)
            run, out = await _wait(cfg, argv, env, os.getcwd(), [])
        return run if run.status != "ok" else _parsed(lambda: _read_capped(result_path), out)


async def _wait(
    cfg: HarnessConfig, argv: list[str], env: dict[str, str], cwd: str, fds: Sequence[int]
) -> tuple[AgentRun, str]:
    """Start `argv` in its own process group and wait at most `timeout_s` (then kill the
    group); an "ok" run comes with its stdout."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(fds),
        )
    except OSError as e:
        return AgentRun("crash", {}, f"cannot start {argv[0]}: {error_text(e)}"), ""
    try:
        out, err = await asyncio.wait_for(proc.communicate(), cfg.timeout_s)
    except asyncio.TimeoutError:
        _kill(proc)
        await proc.wait()
        return _timed_out(cfg), ""
    except asyncio.CancelledError:  # a stopped run: the agent's group goes with it, reaped
        _kill(proc)
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(proc.communicate(), KILL_WAIT_S)
        raise
    return _exited(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


async def _forked(
    cfg: HarnessConfig, parent: WarmParent, env: dict[str, str], folder: str
) -> tuple[AgentRun, str]:
    """`_wait`'s outcomes for a run forked from the warm parent."""
    try:
        status, code, out, err = await parent.run(env, os.getcwd(), folder, cfg.timeout_s)
    except (ParentError, asyncio.TimeoutError) as e:
        return AgentRun("crash", {}, f"warm parent: {error_text(e)}"), ""
    return (_timed_out(cfg), "") if status == "timeout" else _exited(code, out, err)


def _timed_out(cfg: HarnessConfig) -> AgentRun:
    return AgentRun("timeout", {}, f"agent ran past rollout.harness.timeout_s={cfg.timeout_s}s")


def _exited(code: int | None, out: str, err: str) -> tuple[AgentRun, str]:
    """A finished run's outcome: a non-zero status is a crash named by its exception line."""
    stderr = err[-STDERR_TAIL:]
    if code != 0:
        why = f"agent exited with status {code}: {exception_line(err)[:EXCEPTION_LINE]}"
        return AgentRun("crash", {}, f"{why}\n{stderr}"), ""
    return AgentRun("ok", {}), out


def exception_line(stderr: str) -> str:
    """The line that names a Python traceback's exception (`openai.InternalServerError: ...`,
    the first unindented line after the last frame), not the last line: a multi-line message
    (an HTTP error quoting a grammar) would end in its own last line. Without a traceback,
    the last non-blank line."""
    lines = stderr.splitlines()
    frames = [i for i, x in enumerate(lines) if x.startswith('  File "')]
    if frames:
        after = lines[frames[-1] + 1 :]
        hit = next((x for x in after if x.strip() and not x.startswith(" ")), None)
        if hit is not None:
            return hit
    return next((x for x in reversed(lines) if x.strip()), "")


def _read_capped(path: str) -> bytes | None:
    """The result file's bytes (None: not written); the agent wrote it, so no links, a
    regular file only, at most RESULT_MAX bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("the result file is not a regular file")
        data = f.read(RESULT_MAX + 1)
    if len(data) > RESULT_MAX:
        raise ValueError(f"the result file is over {RESULT_MAX} bytes")
    return data


def _parsed(read: Callable[[], bytes | None], stdout: str) -> AgentRun:
    """The result file's object, else the last line of stdout as the answer; a result file
    that cannot be read or parsed is the agent's crash."""
    try:
        data = read()
        value = None if data is None else json.loads(data)
    except (OSError, ValueError, RecursionError) as e:
        return AgentRun("crash", {}, f"$AGENTRL_RESULT: {error_text(e)}")
    if data is not None:
        return AgentRun("ok", value if isinstance(value, dict) else {"answer": value})
    lines = [line for line in stdout.splitlines() if line.strip()]
    return AgentRun("ok", {"answer": lines[-1].strip() if lines else None})


def final_answer(result: dict[str, Any], segments: Sequence[Trajectory]) -> str:
    """The agent's answer, else the last assistant message the session recorded."""
    answer = result.get("answer")
    if answer is not None:
        return str(answer)
    for t in reversed(segments):
        for m in reversed(t.messages):
            if m.role == "assistant" and m.content:
                return m.content
    return ""


class Harness:
    """Runs harness episodes for the trainer on the gateway `host` (call from its loop)."""

    def __init__(
        self,
        host: GatewayHost,
        cfg: HarnessConfig,
        env_factory: Callable[[], Any],
        parent: WarmParent | None = None,
    ) -> None:
        self.host, self.cfg, self.env_factory, self.parent = host, cfg, env_factory, parent
        self.reward_fn = load_callable(cfg.reward_fn) if cfg.reward == "function" else None
        why = unavailable() if cfg.sandbox == "local" else None
        if why:
            raise RuntimeError(f"rollout.harness.sandbox: local: {why}")

    async def collect(
        self,
        tasks: Sequence[TaskSpec],
        n: int,
        *,
        prefix: str,
        concurrency: int,
        on_episode: EpisodeHook = None,
    ) -> tuple[list[TrajectoryGroup], list[Episode]]:
        """`n` agent runs per task: one group per task holding its trained episodes' segments
        (in task order), and every failed run apart."""
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(task: TaskSpec, index: int, k: int) -> Episode:
            async with sem:
                ep = await self.episode(task, index, k, prefix)
            if on_episode is not None:
                on_episode(ep.record)
            return ep

        runs = await asyncio.gather(*(one(t, i, k) for i, t in enumerate(tasks) for k in range(n)))
        groups, failed = [], []
        for i in range(len(tasks)):
            eps = runs[i * n : (i + 1) * n]
            failed += [e for e in eps if e.failure]
            segs = [s for e in eps if not e.failure for s in e.segments]
            groups.append(TrajectoryGroup(f"{prefix}{task_args(tasks[i], i)[0]}", segs))
        return groups, failed

    async def episode(self, task: TaskSpec, index: int, k: int, prefix: str) -> Episode:
        key, seed, options = task_args(task, index)
        group_id = f"{prefix}{key}"
        session = f"{group_id}-{k}-{uuid.uuid4().hex[:16]}"  # 64 random bits: unguessable
        record = Trajectory(prompt_ids=[], group_id=group_id)
        record.metadata.update({"seed": seed, "sample": k, "episode": session})
        try:
            env = self.env_factory()
        except Exception as e:  # noqa: BLE001 - a broken factory fails this episode only
            return _failed(record, "env_error", f"env_factory: {error_text(e)}")
        try:
            return await self._run(env, record, session, seed, options)
        finally:
            self.host.recorder.clear(session)
            try:
                env.close()
            except Exception as e:  # noqa: BLE001 - recorded, never raised
                record.metadata["close_error"] = error_text(e)

    async def _run(
        self,
        env: Any,
        record: Trajectory,
        session: str,
        seed: int | None,
        options: dict[str, Any] | None,
    ) -> Episode:
        env_id = getattr(env, "spec_id", "") or ""
        record.env_id = env_id
        try:
            obs, _ = await env.areset(seed=seed, options=options)
        except Exception as e:  # noqa: BLE001 - any env failure ends this episode only
            return _failed(record, "env_error", f"reset: {error_text(e)}")
        task = task_json(obs, seed, env_id) | {"tools_url": tools_url(self.host.root, session)}
        record.messages = list(obs.messages)
        self.host.env_tools.open(session, env)
        try:
            run = await run_agent(self.cfg, task, self.host.root, session, self.parent)
        finally:
            served = await self.host.env_tools.close(session)  # no call after this point
        assert served is not None
        record.metadata["env_tool_calls"] = served.calls
        segments = [
            Trajectory.from_dict(t.to_dict()) for t in self.host.recorder.trajectories(session)
        ]
        record.metadata["segments"] = len(segments)
        if run.status != "ok":
            reason: TerminationReason = "timeout" if run.status == "timeout" else "agent_crash"
            return _failed(record, reason, run.error)
        broken = [t for t in segments if t.termination == "engine_error"]
        if broken:
            return _failed(record, "engine_error", str(broken[0].metadata.get("error")))
        if not segments:
            return _failed(record, "agent_crash", "the agent made no model call in its session")
        if served.error:
            return _failed(record, "env_error", served.error)
        answer = final_answer(run.result, segments)
        record.metadata["answer"] = answer[:2000]
        try:
            reward = await self._score(env, task, answer, run.result, served.ended)
        except _ScoreError as e:
            return _failed(record, e.reason, e.message)
        record.reward = reward
        for t in segments:
            t.reward, t.env_id, t.group_id = reward, env_id, record.group_id
            t.metadata.update(
                {
                    "seed": seed,
                    "sample": record.metadata["sample"],
                    "episode": session,
                    "episode_segments": len(segments),
                    "answer": record.metadata["answer"],
                    "env_tool_calls": served.calls,
                }
            )
        return Episode(segments, record, meta={"segments": len(segments)})

    async def _score(
        self,
        env: Any,
        task: dict[str, Any],
        answer: str,
        result: dict[str, Any],
        ended: tuple[float, dict[str, Any]] | None,
    ) -> float:
        if self.cfg.reward == "agent":
            return _finite(result.get("reward"), "agent_crash", "the agent's returned reward")
        if self.reward_fn is not None:
            try:
                value = await asyncio.to_thread(self.reward_fn, task, answer)
            except Exception as e:  # noqa: BLE001 - the grader's failure is not the policy's
                raise _ScoreError("env_error", f"reward_fn: {error_text(e)}") from e
            return _finite(value, "env_error", f"reward_fn {self.cfg.reward_fn}")
        if ended is not None:  # an env tool call ended the env's episode (submit, max_turns)
            return _finite(ended[0], "env_error", "the env's grader")
        try:
            _, reward, _, _, _ = await env.astep(Message("assistant", answer))
        except Exception as e:  # noqa: BLE001 - the env's grader failed
            raise _ScoreError("env_error", f"grader: {error_text(e)}") from e
        return _finite(reward, "env_error", "the env's grader")


class _ScoreError(Exception):
    def __init__(self, reason: TerminationReason, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def _finite(value: Any, reason: TerminationReason, what: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)):
        raise _ScoreError(reason, f"{what} is {value!r:.200}; a reward must be a finite number")
    return float(value)


def _failed(record: Trajectory, reason: TerminationReason, error: str) -> Episode:
    record.termination = reason
    record.metadata.update({"error": error, "infra_failure": True})
    return Episode([], record, failure=reason)
