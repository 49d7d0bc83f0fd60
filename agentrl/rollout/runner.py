"""Many episodes at once: n samples per task, grouped, with bounded concurrency.

Every episode gets its own env from `env_factory` (state never mixes between samples) and the
env is always closed. Episodes run as asyncio tasks under a semaphore of
`rollout.concurrency`, so while one waits on a slow tool, others generate: the engine batches
whatever requests are in flight.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import inspect
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentrl.chat.format import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.base import Engine, SamplingParams
from agentrl.rollout.episode import SPANS, error_text, run_episode
from agentrl.rollout.resume import EpisodeBook, EpisodeSnapshot, EpisodeState
from agentrl.rows import Row
from agentrl.types import Trajectory, TrajectoryGroup

# An env seed, a dataset row (reset(options={"row": row}), seed = its dataset index), or raw
# reset options.
TaskSpec = int | Row | dict[str, Any]
# Called with each finished episode (progress bars count them); None when nobody listens. The
# one definition: the Rollout role, the trainer's role Protocols and the workers take it from here.
EpisodeHook = Callable[[Trajectory], None] | None


def sampling_params(
    cfg: SamplingConfig, chat: ChatFormat, seed: int | None = None
) -> SamplingParams:
    """Per-request params from the config; stop tokens are the template's end-of-turn ids."""
    return SamplingParams(
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        stop_token_ids=list(chat.stop_token_ids),
        stop=list(cfg.stop),
        seed=seed,
    )


def task_args(task: TaskSpec, index: int) -> tuple[str, int | None, dict[str, Any] | None]:
    """(group key, reset seed, reset options). Dataset rows reset with seed = row index."""
    if isinstance(task, Row):
        return f"row{index}", task.index, {"row": task}
    if isinstance(task, dict):
        seed = task.get("seed", index)
        return f"row{index}", seed if isinstance(seed, int) else index, dict(task)
    return f"seed{int(task)}", int(task), None


async def _close(env: Any, traj: Trajectory) -> None:
    try:
        if hasattr(env, "aclose"):
            await env.aclose()
        else:
            result = env.close()
            if inspect.isawaitable(result):
                await result
    except Exception as e:  # noqa: BLE001 - a failing close is recorded, never raised
        traj.metadata["close_error"] = error_text(e)


async def run_groups(
    env_factory: Callable[[], Any],
    engine: Engine,
    chat: ChatFormat,
    tasks: Sequence[TaskSpec],
    n: int,
    *,
    sampling: SamplingParams,
    cfg: RolloutConfig,
    group_prefix: str = "",
    on_episode: EpisodeHook = None,
    sem: asyncio.Semaphore | None = None,
    first_index: int = 0,
    book: EpisodeBook | None = None,
    resume: Sequence[EpisodeState] = (),
) -> list[TrajectoryGroup]:
    """`n` episodes per task, returned as one `TrajectoryGroup` per task, in task order.

    `sem` bounds episodes across calls (one per call by default); `first_index` is the first
    task's position in its batch (a dataset row's group key, a dict task's default seed).
    One task only: `book` records where each episode can be continued from, under
    `group_prefix` (`rollout.resume`), and `resume[k]` is what a checkpoint kept of sample k:
    a finished trajectory (kept as is), a resumable snapshot (continued), else None or a
    snapshot that is not resumable (run from the seed)."""
    sem = sem or asyncio.Semaphore(max(1, cfg.concurrency))
    if (book is not None or resume) and len(tasks) != 1:
        raise ValueError("run_groups: book/resume are for one task's group")
    if book is not None:
        book.open(group_prefix, n)

    async def one(task: TaskSpec, index: int, k: int) -> Trajectory:
        kept = resume[k] if k < len(resume) else None
        if isinstance(kept, Trajectory):  # finished before the checkpoint: not run again
            if book is not None:
                book.finish(group_prefix, k, kept)
            if on_episode is not None:
                on_episode(kept)
            return kept
        snap = kept if isinstance(kept, EpisodeSnapshot) and kept.resumable else None
        key, seed, options = task_args(task, index)
        group_id = f"{group_prefix}{key}"
        session = f"{group_id}/{k}"
        params = sampling
        if sampling.seed is not None:
            # Distinct, reproducible streams per sample, keyed by the task (its reset seed),
            # not its position: the same position in the next batch is a different task.
            task_key = seed if seed is not None else index
            params = dataclasses.replace(sampling, seed=sampling.seed + 1_000_003 * task_key + k)
        async with sem:
            try:
                env = env_factory()
            except Exception as e:  # noqa: BLE001 - a broken factory fails this episode only
                traj = Trajectory(prompt_ids=[], termination="env_error")
                traj.metadata.update({"seed": seed, "error": f"env_factory: {error_text(e)}"})
            else:
                ended: Trajectory | None = None
                try:
                    ended = await run_episode(
                        env,
                        engine,
                        chat,
                        params,
                        cfg,
                        seed=seed,
                        options=options,
                        session_id=session,
                        resume=snap,
                        on_boundary=None if book is None else book.marker(group_prefix, k),
                    )
                finally:
                    engine.release_session(session)
                    # A cancelled episode (a pipelined run closing, a cancelled group) still
                    # closes its env: sandboxes and browsers must not outlive it.
                    await _close(env, ended if ended is not None else Trajectory(prompt_ids=[]))
                traj = ended
        traj.group_id = group_id
        traj.metadata["sample"] = k
        if book is not None:
            book.finish(group_prefix, k, traj)
        if on_episode is not None:
            on_episode(traj)
        return traj

    jobs = [one(t, i, k) for i, t in enumerate(tasks, first_index) for k in range(n)]
    try:
        trajs = await asyncio.gather(*jobs)
    finally:
        if book is not None:
            book.close(group_prefix)
    return [
        TrajectoryGroup(trajs[i * n].group_id, list(trajs[i * n : (i + 1) * n]))
        for i in range(len(tasks))
    ]


def summarize(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """Rollout metrics for logging: rewards, turns, lengths, termination shares, the share of
    infrastructure failures (`is_infra_failure`) and the mean seconds per episode of each
    phase (`span/rollout/<phase>`: generate, env, tools, reward; `run_episode`)."""
    trajs = [t for g in groups for t in g.trajectories]
    if not trajs:
        return {}
    n = len(trajs)
    stats: dict[str, float] = {
        "episodes": n,
        "reward_mean": sum(t.reward for t in trajs) / n,
        "turns_mean": sum(len(t.turns) for t in trajs) / n,
        "response_tokens_mean": sum(len(t.response_ids) for t in trajs) / n,
        "sampled_tokens": sum(sum(t.loss_mask) for t in trajs),
        "tool_calls": sum(len(u.tool_calls) for t in trajs for u in t.turns),
        "tool_errors": sum(r.is_error for t in trajs for u in t.turns for r in u.tool_results),
    }
    for reason, count in collections.Counter(t.termination for t in trajs).items():
        stats[f"termination/{reason}"] = count / n
    stats["infra_failures"] = sum(t.infra_failed for t in trajs)
    for phase in SPANS:
        seconds = (_span_s(t, phase) for t in trajs)
        stats[f"span/rollout/{phase}"] = sum(seconds) / n
    return stats


def _span_s(traj: Trajectory, phase: str) -> float:
    spans = traj.metadata.get("spans")
    value = spans.get(phase) if isinstance(spans, dict) else None
    return float(value) if isinstance(value, (int, float)) else 0.0


def env_error_line(groups: Sequence[TrajectoryGroup]) -> str | None:
    """One console line for a step whose episodes hit infrastructure failures (env errors,
    engine errors, sandbox errors, timeouts, ...: `is_infra_failure`): how many of each, and
    the first error (the `termination/*` metrics alone are easy to miss); None when none did."""
    trajs = [t for g in groups for t in g.trajectories]
    errors = [t for t in trajs if t.infra_failed]
    if not errors:
        return None
    counts = collections.Counter(t.termination for t in errors)
    kinds = ", ".join(f"{reason} {k}" for reason, k in sorted(counts.items()))
    first = str(errors[0].metadata.get("error") or "no message").splitlines()[0][:300]
    return (
        f"warning: {len(errors)}/{len(trajs)} episodes ended in infrastructure failures "
        f"({kinds}; left out of training); first: {first}"
    )


class RolloutRunner:
    """The trainer's entry point: `await runner.collect(seeds_or_rows, n)`.

    `collect_sync` runs on a private event loop kept for the runner's lifetime, so engines
    that hold loop-bound state (a batching task) keep working across calls.
    """

    def __init__(
        self,
        engine: Engine,
        chat: ChatFormat,
        env_factory: Callable[[], Any],
        rollout_cfg: RolloutConfig,
        sampling_cfg: SamplingConfig,
        *,
        seed: int | None = None,
        on_episode: EpisodeHook = None,
    ) -> None:
        if rollout_cfg.tool_format != "auto" and rollout_cfg.tool_format != chat.tool_format:
            chat = ChatFormat(
                chat.tokenizer,
                rollout_cfg.tool_format,
                dict(chat.template_kwargs),
                chat.chat_template,
                vision=getattr(chat, "vision", None),
            )
        self.engine, self.chat, self.env_factory = engine, chat, env_factory
        self.rollout_cfg, self.sampling_cfg = rollout_cfg, sampling_cfg
        self.seed, self.on_episode = seed, on_episode
        self.calls = 0
        self.last_stats: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None  # the loop's thread, once in background
        self._sem: asyncio.Semaphore | None = None
        self.book = EpisodeBook()  # the groups `collect_group` has in flight

    async def collect(
        self,
        seeds_or_rows: Sequence[TaskSpec],
        n: int,
        *,
        sampling_cfg: SamplingConfig | None = None,
    ) -> list[TrajectoryGroup]:
        """`n` episodes per seed or dataset row, grouped per task. The caller passes `n` (the
        trainer: `rollout.n`); the runner has no fallback of its own.

        `sampling_cfg` overrides the runner's sampling for this call (e.g. greedy evaluation
        on the same engine and loop).
        """
        self.calls += 1
        t0 = time.monotonic()
        sampling = sampling_params(sampling_cfg or self.sampling_cfg, self.chat, self.seed)
        groups = await run_groups(
            self.env_factory,
            self.engine,
            self.chat,
            list(seeds_or_rows),
            n,
            sampling=sampling,
            cfg=self.rollout_cfg,
            group_prefix=f"c{self.calls}-",
            on_episode=self.on_episode,
        )
        self.last_stats = summarize(groups) | {"wall_s": time.monotonic() - t0}
        return groups

    async def collect_group(
        self,
        task: TaskSpec,
        position: int,
        n: int,
        key: str,
        resume: Sequence[EpisodeState] = (),
    ) -> TrajectoryGroup:
        """`n` episodes of one task as one group, under the runner-wide `rollout.concurrency`
        bound: the unit a pipelined trainer schedules (`agentrl.trainer.pipeline`). `key`
        prefixes the group id; `position` is the task's place in its batch; `resume`: what
        a checkpoint kept of each sample (`run_groups`). The book records the group while
        it runs (`in_flight`)."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(max(1, self.rollout_cfg.concurrency))
        sampling = sampling_params(self.sampling_cfg, self.chat, self.seed)
        (group,) = await run_groups(
            self.env_factory,
            self.engine,
            self.chat,
            [task],
            n,
            sampling=sampling,
            cfg=self.rollout_cfg,
            group_prefix=key,
            sem=self._sem,
            first_index=position,
            book=self.book,
            resume=resume,
        )
        return group

    async def _in_flight(self) -> dict[str, list[EpisodeState]]:
        return self.book.snapshot()

    def in_flight(self, timeout_s: float = 120.0) -> dict[str, list[EpisodeState]]:
        """Where each episode of the groups `collect_group` has running can be continued
        from, by group key (`EpisodeBook.snapshot`), taken on the runner's loop."""
        if self._thread is None:
            return self.book.snapshot()  # no loop runs episodes meanwhile
        return self.submit(self._in_flight()).result(timeout=timeout_s)  # type: ignore[no-any-return]

    def start_background(self) -> None:
        """From now on the runner's loop runs in its own thread, so episodes go on while the
        caller trains (`submit`); `run_sync` (evaluation) then runs on that same loop, where
        the engine's batching task lives."""
        if self._thread is not None:
            return
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        loop = self._loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="agentrl-rollout", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Schedule `coro` on the background loop (`start_background` first)."""
        if self._thread is None or self._loop is None:
            coro.close()
            raise RuntimeError("submit() needs start_background() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def collect_sync(
        self,
        seeds_or_rows: Sequence[TaskSpec],
        n: int,
        *,
        sampling_cfg: SamplingConfig | None = None,
    ) -> list[TrajectoryGroup]:
        """`collect` from synchronous code; inside a running event loop, await `collect`."""
        return self.run_sync(self.collect(seeds_or_rows, n, sampling_cfg=sampling_cfg))

    def run_sync(self, coro: Any) -> Any:
        """Run `coro` (e.g. several `collect`s gathered) on the runner's private loop, where
        the engine's task lives, from synchronous code."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("collect_sync called from a running event loop; await collect()")
        if self._thread is not None:
            return self.submit(coro).result()
        try:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            return _run_interruptible(self._loop, coro)
        except BaseException:
            # A Ctrl-C before `coro` became a task: close it (no "never awaited" warning).
            # One that is a task is cancelled by `close` instead.
            loop = self._loop
            tasks = asyncio.all_tasks(loop) if loop is not None and not loop.is_closed() else ()
            owned = any(t.get_coro() is coro for t in tasks)
            if not owned and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()
            raise

    def close(self, *, close_engine: bool = False) -> None:
        """Close the private loop (and, if asked, the engine on it, where its task lives)."""
        if self._thread is not None and self._loop is not None:
            if close_engine:
                with contextlib.suppress(Exception):
                    self.submit(self.engine.close()).result(timeout=60)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=60)
            self._thread = None
            close_engine = False
        if self._loop is not None and not self._loop.is_closed():
            if close_engine:
                self._loop.run_until_complete(self.engine.close())
            _cancel_pending(self._loop)
            self._loop.close()


def _run_interruptible(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """`loop.run_until_complete(coro)`, where Ctrl-C cancels `coro`'s task (which unwinds at
    its next await: envs closed, groups released) and then raises KeyboardInterrupt, as
    `asyncio.Runner.run` does (Python 3.11+; we support 3.10). Python's own handler would
    raise at any bytecode instead, e.g. between creating coroutines and scheduling them.

    Where SIGINT is ignored (a job started with `&` by a script: the shell ignores Ctrl-C for
    it), a real SIGINT stays ignored, but the CLI's SIGTERM handler, which calls the SIGINT
    handler with its own number, still cancels the collect this way."""
    previous = signal.getsignal(signal.SIGINT)
    ignored = previous == signal.SIG_IGN
    if threading.current_thread() is not threading.main_thread() or (
        previous is not signal.default_int_handler and not ignored
    ):
        return loop.run_until_complete(coro)
    task: asyncio.Task | None = None
    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if signum == signal.SIGINT and ignored:
            return  # ignored by whoever started us, as before
        if interrupted:  # a second Ctrl-C: the unwinding hangs, stop now
            raise KeyboardInterrupt
        interrupted = True
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)

    # Installed before the task is created: Python's handler, raising inside `create_task`
    # (its Python `call_soon`), left the task's first step scheduled but the task
    # unregistered; `run_sync` then closed the coroutine, and the next use of the loop
    # stepped it ("cannot reuse already awaited coroutine", seen once in CI under SIGTERM).
    signal.signal(signal.SIGINT, on_sigint)
    try:
        task = loop.create_task(coro)
        if interrupted:  # came while it was being created
            task.cancel()
        result = loop.run_until_complete(task)
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:  # also when the task swallowed its cancellation and returned
        raise KeyboardInterrupt
    return result


def _cancel_pending(loop: asyncio.AbstractEventLoop, timeout_s: float = 30.0) -> None:
    """Cancel the tasks an error or a second Ctrl-C left on the stopped loop (episodes, the
    engine's waits) and let them unwind (closing their envs), as `asyncio.run` does: a loop
    closed with tasks pending prints "Task was destroyed but it is pending!" for each."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(asyncio.wait(pending, timeout=timeout_s))
    for task in pending:  # fetch what each raised, so none is logged as never retrieved
        if task.done() and not task.cancelled():
            task.exception()
