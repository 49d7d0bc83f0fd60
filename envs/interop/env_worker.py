"""The child half of `process_env.ProcessEnv`: one env, served over two pipes.

    python -m agentrl.envs.interop.env_worker REQUEST_FD REPLY_FD

Reads JSON frames (`build`, `reset`, `step`, `oracle`, `adversaries`, `release`: close the env
and wait for the next `build`, `close`: exit) and answers
each with `{"ok": true, "value": ...}` or `{"ok": false, "error": "..."}`: an env that raises
is reported to the trainer, which raises it there; the worker itself keeps serving. It exits
on `close` or when the trainer's end of the pipe closes (the trainer died).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

from agentrl.envs.interop.process_env import (
    ATTRS,
    decode_message,
    encode_message,
    encode_observation,
    read_frame,
    to_json,
    write_frame,
)


def serve(req: int, rep: int) -> None:
    env: Any = None
    while True:
        try:
            msg = read_frame(req)
        except EOFError:
            break
        op = msg.get("op")
        try:
            if op == "close":
                break
            if op == "release":  # the trainer parks this worker: close the env, stay up
                env, closing = None, env
                if closing is not None:
                    closing.close()
                write_frame(rep, {"ok": True, "value": None})
                continue
            value = handle(env, msg)
            if op == "build":
                env, value = value
            write_frame(rep, {"ok": True, "value": value})
        except Exception as e:  # noqa: BLE001 - the env's error goes to the trainer
            last = traceback.extract_tb(e.__traceback__)[-1:]
            where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
            write_frame(rep, {"ok": False, "error": f"{type(e).__name__}: {e}{where}"})
    if env is not None:
        try:
            env.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            traceback.print_exc()


def handle(env: Any, msg: dict[str, Any]) -> Any:
    op = msg.get("op")
    if op == "build":
        from agentrl.envs import make

        built = make(msg["id"], **msg.get("kwargs", {}))
        return built, {a: to_json(getattr(built, a)) for a in ATTRS}
    if env is None:
        raise RuntimeError(f"{op!r} before build")
    if op == "reset":
        obs, info = env.reset(seed=msg.get("seed"), options=msg.get("options"))
        return {"obs": encode_observation(obs), "info": to_json(info)}
    if op == "step":
        obs, reward, term, trunc, info = env.step(decode_message(msg["action"]))
        return {
            "obs": encode_observation(obs),
            "reward": float(reward),
            "term": bool(term),
            "trunc": bool(trunc),
            "info": to_json(info),
        }
    if op == "oracle":
        action = env.oracle_action()
        return None if action is None else encode_message(action)
    if op == "adversaries":
        return {k: [encode_message(m) for m in ms] for k, ms in env.adversaries().items()}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
