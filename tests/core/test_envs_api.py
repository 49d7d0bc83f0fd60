"""The env API, registry routes (entry point, --env-module) and check_env failures."""

import json
import subprocess
import sys
import textwrap

import pytest

import agentrl
from agentrl.envs import EnvCheckError, ToolEnv, check_env, load_env_module, make, registry
from agentrl.types import Message

CUSTOM_ENV = textwrap.dedent(
    '''
    """Reverse a word; a `reverse` tool helps. Registered as demo/reverse-v0."""
    from agentrl.envs import Task, ToolEnv, register
    from agentrl.tools import ToolSet, tool
    from agentrl.types import Message, ToolCall


    @tool
    def reverse(text: str) -> str:
        """Reverse a string.

        Args:
            text: the string to reverse.
        """
        return text[::-1]


    class ReverseEnv(ToolEnv):
        description = "Reverse a word using a tool."

        def __init__(self):
            super().__init__(ToolSet.of(reverse), max_turns=3)

        def new_task(self, rng, options):
            word = "".join(rng.choice(list("abcdefgh"), size=5))
            return Task([Message("user", f"Reverse {word}")], answer=word[::-1], info={"w": word})

        def score(self, final):
            return float(final.content.strip() == self.task.answer)

        def oracle_action(self):
            if self.turn == 0:
                call = ToolCall("reverse", {"text": self.task.info["w"]}, id="c")
                return Message("assistant", "", tool_calls=[call])
            return Message("assistant", self.task.answer)


    register("demo/reverse-v0", ReverseEnv)
    '''
)


def test_custom_env_via_env_module(tmp_path):
    path = tmp_path / "my_env.py"
    path.write_text(CUSTOM_ENV)
    assert len(CUSTOM_ENV.strip().splitlines()) < 50
    load_env_module(path)
    report = check_env(make("demo/reverse-v0"))
    assert report == {"oracle": True, "tools": ["reverse"], "adversaries": []}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli",
            "envs",
            "check",
            "demo/reverse-v0",
            "--env-module",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS demo/reverse-v0" in out.stdout


def test_custom_env_via_entry_point(tmp_path):
    """Install a real distribution with an `agentrl.envs` entry point and load it."""
    pkg = tmp_path / "pkg"
    (pkg / "agentrl_demo_plugin").mkdir(parents=True)
    (pkg / "agentrl_demo_plugin" / "__init__.py").write_text(
        CUSTOM_ENV.replace("demo/reverse-v0", "plugin/reverse-v0").replace(
            'register("plugin/reverse-v0", ReverseEnv)',
            'def setup():\n    register("plugin/reverse-v0", ReverseEnv)',
        )
    )
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "agentrl-demo-plugin"
        version = "0.0.1"
        [project.entry-points."agentrl.envs"]
        reverse = "agentrl_demo_plugin:setup"
    """)
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(pkg),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    code = "import json,agentrl.envs as e; from agentrl.envs import check_env, make; print(json.dumps(check_env(make('plugin/reverse-v0'))))"
    env = {"PYTHONPATH": str(target)}
    import os

    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "oracle": True,
        "tools": ["reverse"],
        "adversaries": [],
    }


class BrokenOracleEnv(ToolEnv):
    def new_task(self, rng, options):
        from agentrl.envs import Task

        return Task([Message("user", "say yes")], answer="yes")

    def score(self, final):
        return 0.0  # bug: never rewards the right answer

    def oracle_action(self):
        return Message("assistant", "yes")


class NondeterministicEnv(BrokenOracleEnv):
    def new_task(self, rng, options):
        import random

        from agentrl.envs import Task

        return Task([Message("user", f"say {random.random()}")], answer="yes")


class BadRewardEnv(BrokenOracleEnv):
    def score(self, final):
        return 7.0


@pytest.mark.parametrize(
    "env_cls,problem",
    [
        (BrokenOracleEnv, "oracle scored 0.0"),
        (NondeterministicEnv, "seeding is not deterministic"),
        (BadRewardEnv, "outside reward_range"),
    ],
)
def test_broken_envs_fail_check_with_named_problem(env_cls, problem):
    with pytest.raises(EnvCheckError, match=problem):
        check_env(env_cls())


def test_envs_list_json_and_check_all():
    out = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "envs", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rows = json.loads(out.stdout)
    assert {"id", "family", "description"} <= set(rows[0])
    assert "math/calc-v0" in {r["id"] for r in rows}


def test_make_via_top_level_and_unknown_id():
    env = agentrl.make("math/calc-v0", n_operands=2)
    obs, _ = env.reset(seed=0)
    assert obs.messages[0].content.count(" ") == 4
    with pytest.raises(KeyError, match="unknown env id"):
        agentrl.make("math/nope-v0")
    assert "math/calc-v0" in registry


def test_async_api_runs_concurrently():
    import asyncio

    async def main():
        envs = [make("math/calc-v0") for _ in range(4)]
        obs = await asyncio.gather(*(e.areset(seed=i) for i, e in enumerate(envs)))
        acts = [e.oracle_action() for e in envs]
        steps = await asyncio.gather(*(e.astep(a) for e, a in zip(envs, acts, strict=True)))
        return obs, steps

    obs, steps = asyncio.run(main())
    assert all(s[0].messages[0].role == "tool" for s in steps)


def _reverse_env():
    """CUSTOM_ENV's ReverseEnv class and module namespace, unregistered."""
    namespace: dict = {}
    exec(CUSTOM_ENV.replace('register("demo/reverse-v0", ReverseEnv)', ""), namespace)
    return namespace["ReverseEnv"], namespace


def test_toolenv_step_override_alone_is_refused_at_class_definition():
    """The rollout calls astep(): a step() override alone would train on another reward than
    env.step() and check_env show, so the class is refused with the hooks to use instead."""
    base, _ = _reverse_env()
    hooks = r"overrides step\(\) without astep\(\).*score\(final\).*astep\(\) alone"
    with pytest.raises(TypeError, match=hooks):

        class Shaped(base):  # noqa: F841 - defining it is the test
            def step(self, action):
                obs, _, term, trunc, info = super().step(action)
                return obs, 1.0, term, trunc, info

    class Both(base):  # overriding both, consistently, stays allowed (as CodeEnv does)
        def step(self, action):
            return super().step(action)

        async def astep(self, action):
            return await super().astep(action)

    with pytest.raises(TypeError, match="Below overrides step"):

        class Below(Both):  # noqa: F841 - astep overridden above, step here: refused
            def step(self, action):
                return super().step(action)

    with pytest.raises(TypeError, match="overrides astep.. but inherits step.. from .*Both"):

        class Async(Both):  # noqa: F841 - Both.step would not run this astep on answers
            async def astep(self, action):
                return await super().astep(action)


def test_toolenv_astep_override_is_seen_by_step_too():
    """An astep() override is the supported way to change what a step returns: env.step()
    (check_env, the SFT teacher) runs it, final messages included."""
    import asyncio

    base, _ = _reverse_env()

    class Shaped(base):
        async def astep(self, action):
            obs, _, term, trunc, info = await super().astep(action)
            return obs, 1.0, term, trunc, info

    env = Shaped()
    env.reset(seed=0)
    assert env.step(Message("assistant", "wrong"))[1] == 1.0
    env.reset(seed=0)
    assert asyncio.run(env.astep(Message("assistant", "wrong")))[1] == 1.0


def test_toolenv_astep_scores_off_the_event_loop():
    """A slow score() runs in a worker thread: other coroutines go on meanwhile."""
    import asyncio
    import threading

    base, _ = _reverse_env()
    seen = []

    class Slow(base):
        def score(self, final):
            seen.append(threading.current_thread() is threading.main_thread())
            return 0.0

    async def main():
        env = Slow()
        env.reset(seed=0)
        return await env.astep(Message("assistant", "x"))

    assert asyncio.run(main())[2] is True and seen == [False]


def test_check_env_fails_when_the_oracles_tools_fail():
    _, ns = _reverse_env()
    from agentrl.tools import ToolSet, tool

    @tool
    def reverse(text: str) -> str:
        """Reverse a string.

        Args:
            text: the string to reverse.
        """
        raise ValueError("tool exploded")

    class Broken(ns["ReverseEnv"]):
        def __init__(self):
            ToolEnv.__init__(self, ToolSet.of(reverse), max_turns=3)

    with pytest.raises(EnvCheckError, match=r"oracle's tool calls failed.*reverse.*tool exploded"):
        check_env(Broken())
    check_env(ns["ReverseEnv"]())  # the working tool passes


def test_a_missing_hook_names_the_class_and_the_method():
    """An env that leaves out a hook the base calls gets an error that says which class must
    implement what, not a bare NotImplementedError."""
    from agentrl.envs import AgentEnv, Task

    class NoScore(ToolEnv):
        def new_task(self, rng, options):
            return Task([Message("user", "hi")])

    env = NoScore()
    env.reset(seed=0)
    with pytest.raises(NotImplementedError, match=r"NoScore must implement score\(final\)"):
        env.step(Message("assistant", "done"))

    class NoTask(ToolEnv):
        def score(self, final):
            return 1.0

    with pytest.raises(NotImplementedError, match=r"NoTask must implement new_task\(rng, opt"):
        NoTask().reset(seed=0)

    class NoStep(AgentEnv):
        pass

    with pytest.raises(NotImplementedError, match=r"NoStep must implement step\(action\)"):
        NoStep().step(Message("assistant", "done"))


def test_registering_a_taken_id_names_where_the_existing_env_is(tmp_path, monkeypatch):
    """A user env under a built-in's id would replace it silently: refused, naming the id and
    the existing env's definition. The same env registered again (its module imported a
    second time, under another name) stays harmless."""
    import importlib

    from agentrl.envs import register, spec

    builtin = spec("math/calc-v0")
    reverse, _ = _reverse_env()
    taken = r"env id 'math/calc-v0' is already registered by agentrl\.envs\.math\.calc:CalcEnv"
    with pytest.raises(ValueError, match=taken):
        register("math/calc-v0", reverse)
    assert spec("math/calc-v0") is builtin

    first, second = tmp_path / "twice_env.py", tmp_path / "other_env.py"
    first.write_text(CUSTOM_ENV.replace("demo/reverse-v0", "twice/reverse-v0"))
    load_env_module(first)  # as agentrl_user_env_twice_env
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("twice_env")  # again, as twice_env: a second class object
    finally:
        sys.modules.pop("twice_env", None)
    assert check_env(make("twice/reverse-v0"))["oracle"]
    second.write_text(first.read_text())
    with pytest.raises(
        ValueError, match=r"'twice/reverse-v0' is already registered by .*twice_env"
    ):
        load_env_module(second)
    # The built-in's class with other defaults under its id would change it as silently.
    with pytest.raises(ValueError, match=r"'math/calc-v0' is already registered with defaults"):
        register("math/calc-v0", builtin.entry_point, n_operands=5)
    assert spec("math/calc-v0") is builtin
