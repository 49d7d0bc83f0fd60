"""A prefixed env in its own process of another Python (`env_kwargs.python`), as one whose
package clashes with agentrl's would run: a real child venv (`python -m venv
--system-site-packages`) holding a module the trainer's Python cannot import, the real
Gymnasium adapter inside it, the JSON pipe between them; `check_env` plays it from here."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentrl import envs
from agentrl.envs.checker import check_env
from agentrl.envs.interop.process_env import ProcessEnv
from agentrl.types import Message, ToolCall

# A Gymnasium env that exists only in the child's venv (Discrete actions, an ansi render: what
# `gym:` plays). Step 1 wins; `crash` and `hang` are env bugs the trainer must survive.
CLASH_ENV = textwrap.dedent(
    """
    import os, sys, time
    import gymnasium as gym
    from gymnasium import spaces

    class Clash(gym.Env):
        metadata = {"render_modes": ["ansi"]}

        def __init__(self, render_mode="ansi", mode="ok"):
            self.render_mode, self.mode = render_mode, mode
            self.action_space = spaces.Discrete(2)
            self.observation_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            print("noise on the child's stdout")  # must not corrupt the pipe
            return 0, {"pid": os.getpid(), "set": {1, 2}}

        def step(self, action):
            if self.mode == "crash":
                os._exit(3)
            if self.mode == "hang":
                time.sleep(3600)
            return 1, float(action == 1), True, False, {}

        def render(self):
            return "press 1 to win"

    gym.register("Clash-v0", entry_point=Clash)
    """
)


@pytest.fixture(scope="module")
def child_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("childvenv")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (Path(site) / "clash_env.py").write_text(CLASH_ENV)
    # agentrl itself must import there: from this checkout, as the suite's own does
    repo = Path(__file__).resolve().parents[2]
    (Path(site) / "agentrl_checkout.pth").write_text(f"{repo}\n")
    return str(py)


def test_module_lives_only_in_the_child(child_python: str) -> None:
    assert importlib.util.find_spec("clash_env") is None


def test_env_runs_in_its_own_process_and_earns_its_reward_there(child_python: str) -> None:
    env = envs.make("gym:clash_env:Clash-v0", env_kwargs={}, python=child_python)
    try:
        assert isinstance(env, ProcessEnv) and env.spec_id == "gym:clash_env:Clash-v0"
        obs, info = env.reset(seed=0)
        assert info["pid"] != os.getpid()  # the env ran over there
        assert info["set"] == "{1, 2}"  # what JSON cannot hold crosses as its repr
        assert obs.messages and "press 1 to win" in obs.messages[-1].content
        assert [t["function"]["name"] for t in obs.tools] == ["act"]  # schemas cross
        move = ToolCall("act", {"action": 1}, id="call_0")
        out, reward, term, _, _ = env.step(Message("assistant", "", tool_calls=[move]))
        assert (reward, term) == (1.0, True) and out.messages[0].tool_call_id == "call_0"
        check_env(env)  # the contract, played from here
    finally:
        env.close()


def test_a_child_that_dies_is_one_error_naming_the_env(child_python: str) -> None:
    env = envs.make("gym:clash_env:Clash-v0", env_kwargs={"mode": "crash"}, python=child_python)
    env.reset(seed=0)
    move = ToolCall("act", {"action": 1}, id="c")
    with pytest.raises(RuntimeError, match=r"gym:clash_env:Clash-v0.*died during step"):
        env.step(Message("assistant", "", tool_calls=[move]))
    env.close()  # idempotent after the death


def test_a_hanging_env_times_out_and_its_process_is_stopped(child_python: str) -> None:
    env = envs.make(
        "gym:clash_env:Clash-v0",
        env_kwargs={"mode": "hang"},
        python=child_python,
        process_timeout_s=3,
    )
    env.reset(seed=0)
    proc = env._proc
    assert proc is not None
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="process_timeout_s"):
        env.step(Message("assistant", "", tool_calls=[ToolCall("act", {"action": 1}, id="c")]))
    assert time.monotonic() - t0 < 60
    assert proc.poll() is not None  # stopped, not left running


def test_an_env_error_crosses_as_one_line(child_python: str) -> None:
    with pytest.raises(RuntimeError, match=r"own process\), build: NameNotFound.*Nope"):
        envs.make("gym:clash_env:Nope-v0", python=child_python)


def test_a_bad_interpreter_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="env_kwargs.python"):
        envs.make("gym:FrozenLake-v1", python=str(tmp_path / "missing" / "python"))


@pytest.mark.skipif(importlib.util.find_spec("openreward") is None, reason="needs agentrl[ors]")
def test_ors_env_in_its_own_process(child_python: str) -> None:
    """A real OpenReward env (the bundled arith one) played across the pipe: its tools and
    rewards arrive as they do in-process."""
    local = envs.make("ors:arith")
    remote = envs.make("ors:arith", python=child_python)
    try:
        a, _ = local.reset(seed=3)
        b, _ = remote.reset(seed=3)
        assert [m.content for m in a.messages] == [m.content for m in b.messages]
        assert a.tools == b.tools
        check_env(remote)
    finally:
        local.close()
        remote.close()


def test_a_closed_envs_worker_is_reused_by_the_next(child_python: str) -> None:
    """Episodes after the first skip the interpreter's start-up: a closed env parks its
    worker (the env inside closed) and the next env of the same kind builds in it."""
    first = envs.make("gym:clash_env:Clash-v0", env_kwargs={}, python=child_python)
    pid = first.reset(seed=0)[1]["pid"]
    first.close()
    second = envs.make("gym:clash_env:Clash-v0", env_kwargs={}, python=child_python)
    other = envs.make("gym:clash_env:Clash-v0", env_kwargs={"mode": "crash"}, python=child_python)
    try:
        assert second.reset(seed=1)[1]["pid"] == pid  # same worker, fresh env
        assert other.reset(seed=1)[1]["pid"] != pid  # another kind: its own worker
    finally:
        second.close()
        other.close()
