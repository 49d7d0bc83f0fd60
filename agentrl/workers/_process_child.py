"""The rollout child's main loop (`workers.process_rollout`): commands in, replies out.

One thread reads commands in order. Weight syncs are applied on it, so a command posted
after a sync sees the new weights; each acknowledged sync is also the child's step boundary
for `trainer.gc_every` (`agentrl.trainer.gc_control`). A group is scheduled on the runner's
background loop and
replies when it finishes; blocking calls (collect, evaluate) run on a small pool so groups
and syncs keep flowing meanwhile. The child exits when told to close, when its parent
disappears, or when building the rollout fails (the error is the start-up reply); it ignores
Ctrl-C, which the trainer handles by closing it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import pickle
import queue
import signal
import traceback
from typing import Any

import torch

from agentrl.trainer.gc_control import GcSchedule

_POLL_S = 0.5


def _send(out: Any, kind: str, rid: int, payload: Any) -> None:
    """Put a reply; one that cannot be pickled becomes an error reply naming why (the queue
    would otherwise drop it in its feeder thread and the caller would wait for nothing)."""
    try:
        pickle.dumps(payload)
    except Exception as e:  # noqa: BLE001 - reported to the caller instead
        kind, payload = "err", f"reply could not be pickled: {type(e).__name__}: {e}"
    out.put((kind, rid, payload))


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"


def _blocking(rollout: Any, op: str, args: tuple[Any, ...], hook: Any) -> Any:
    if op == "collect":
        groups = rollout.collect(*args, on_episode=hook)
        return groups, dict(rollout.stats)
    if op == "collect_with_greedy":
        groups, greedy = rollout.collect_with_greedy(*args, on_episode=hook)
        return groups, greedy, dict(rollout.stats)
    if op == "evaluate":
        return rollout.evaluate(*args, on_episode=hook)
    if op == "offload":
        return rollout.offload()
    if op == "in_flight":
        return rollout.in_flight()
    raise ValueError(f"unknown rollout command {op!r}")


def serve(
    build: Any,
    cfg: Any,
    device: torch.device,
    staging: dict[str, torch.Tensor],
    cmd: Any,
    out: Any,
) -> None:
    """Build the rollout from `cfg` on `device` (weights from `staging`), then serve."""
    parent = os.getppid()
    # Ctrl-C reaches the whole process group: the trainer handles it and closes this child
    # (or the child sees its parent gone), so the child never dies half-way on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        rollout = build(cfg, device, staging)
        rollout.start()
    except BaseException as e:  # noqa: BLE001 - the start-up reply carries it
        _send(out, "err", -1, f"building the rollout failed: {_error(e)}")
        return
    info = {"features": rollout.engine.features, "weight_version": rollout.weight_version}
    _send(out, "ok", -1, info)
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="agentrl-rollout-call")
    collections, syncs = GcSchedule(cfg.trainer.gc_every), 0
    groups: dict[int, concurrent.futures.Future[Any]] = {}

    def reply(rid: int, fut: concurrent.futures.Future[Any]) -> None:
        groups.pop(rid, None)
        if fut.cancelled():
            return
        e = fut.exception()
        _send(out, "err" if e else "ok", rid, _error(e) if e else fut.result())

    close_rid = None
    try:
        while True:
            try:
                op, rid, hooked, args = cmd.get(timeout=_POLL_S)
            except queue.Empty:
                if os.getppid() != parent:
                    return  # the trainer is gone
                continue
            if op == "close":
                close_rid = rid
                break
            if op == "weights":
                try:
                    rollout.sync_weights(staging.items())
                    _send(out, "ok", rid, rollout.weight_version)
                except Exception as e:  # noqa: BLE001 - the trainer raises it
                    _send(out, "err", rid, _error(e))
                syncs += 1
                collections.after_step(syncs)
            elif op == "group":
                fut = rollout.submit_group(*args)
                groups[rid] = fut
                fut.add_done_callback(functools.partial(reply, rid))
            elif op == "cancel":
                if (running := groups.pop(rid, None)) is not None:
                    running.cancel()
            else:

                def hook(traj: Any, rid: int = rid) -> None:
                    out.put(("episode", rid, traj))

                call = pool.submit(_blocking, rollout, op, args, hook if hooked else None)
                call.add_done_callback(functools.partial(reply, rid))
    finally:
        collections.close()
        for fut in list(groups.values()):
            fut.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        try:
            rollout.close()
        finally:
            if close_rid is not None:
                _send(out, "ok", close_rid, None)
