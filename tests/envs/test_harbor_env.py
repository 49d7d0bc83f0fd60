"""`harbor:` ids: Harbor task folders run on real sandboxes (local bubblewrap; docker with the
task's image built locally when an engine answers). The oracle (`solution/solve.sh`) scores 1
and a no-op 0 on every bundled task; the tests and the solution are never in the agent's
sandbox; the reward is what the tests wrote; task.toml's limits apply."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from harbor_play import bash, play_oracle

import agentrl.envs as envs
from agentrl.cli import main
from agentrl.envs.harbor.sandbox import rewrite
from agentrl.envs.harbor.tasks import TaskError, bundled_names, load_tasks, plan_dockerfile
from agentrl.types import Message, ToolCall

BUNDLED = bundled_names()


def _local_reason() -> str | None:
    if os.geteuid() != 0:
        return "local sandbox needs root"
    return None if shutil.which("bwrap") else "bubblewrap not installed"


def _docker_reason() -> str | None:
    from agentrl.sandboxes.docker_backend import docker_status

    ok, why = docker_status()
    return None if ok else why


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    reason = _local_reason() if request.param == "local" else _docker_reason()
    if reason:
        pytest.skip(f"{request.param} backend unavailable: {reason}")
    return str(request.param)


def test_five_bundled_tasks_of_different_kinds() -> None:
    assert BUNDLED == ["count-errors", "edit-config", "fix-mean", "lowercase-ext", "region-totals"]
    for task in load_tasks("bundled"):
        assert task.solution["solve.sh"] and task.tests["test.sh"]
        assert task.local_blocker() is None and task.workdir == "/app"


@pytest.mark.parametrize("name", BUNDLED)
def test_oracle_scores_1_and_a_no_op_0(name: str, backend: str) -> None:
    env = envs.make(f"harbor:bundled/{name}", backend=backend)
    try:
        env.reset(seed=0)
        total, info = play_oracle(env)
        assert total == 1.0, (info, env.last_verdict)
        env.reset(seed=0)
        _, reward, done, _, info = env.step(Message("assistant", "I am done."))
        assert done and reward == 0.0 and "error" not in info, info
    finally:
        env.close()


def test_tests_and_solution_are_not_in_the_agents_sandbox(backend: str) -> None:
    env = envs.make("harbor:bundled/fix-mean", backend=backend)
    obs, _ = env.reset(seed=0)
    assert "/work/repo" in obs.messages[0].content and "/app" not in obs.messages[0].content
    probe = "ls -a /work /work/repo; ls /tests /solution /logs /work/tests 2>&1; find / -name test.sh -o -name solve.sh 2>/dev/null | head"
    out, *_ = env.step(bash(probe))
    text = out.messages[0].content
    assert "stats.py" in text and "test.sh" not in text and "solve.sh" not in text, text
    env.close()


def test_the_agents_changes_are_graded_in_a_fresh_sandbox() -> None:
    """A fix made with the file tools counts; a process left running does not survive."""
    if _local_reason():
        pytest.skip(_local_reason() or "")
    env = envs.make("harbor:bundled/fix-mean")
    env.reset(seed=0)
    src = env.harbor._ws.read("stats.py").decode().replace("(len(xs) - 1)", "len(xs)")
    write = ToolCall("write_file", {"path": "/work/repo/stats.py", "content": src}, id="w")
    obs, *_ = env.step(Message("assistant", "", tool_calls=[write]))
    assert "Wrote" in obs.messages[0].content
    _, reward, done, _, info = env.step(Message("assistant", "fixed"))
    assert done and reward == 1.0 and info["rewards"] == {"reward": 1.0}


def test_agent_code_that_writes_a_reward_and_kills_the_tests_earns_nothing(backend: str) -> None:
    """The adversary has full Python in the module the tests import: it writes reward 1 to
    every reward file it can reach, then ends the test script or its own process early."""
    env = envs.make("harbor:bundled/fix-mean", backend=backend)
    forge = (
        "import os, signal\n"
        "for d in ('/logs/verifier', '/work/logs/verifier'):\n"
        "    try:\n"
        "        os.makedirs(d, exist_ok=True)\n"
        "        open(d + '/reward.txt', 'w').write('1')\n"
        "        open(d + '/reward.json', 'w').write('{\"reward\": 1}')\n"
        "    except OSError:\n"
        "        pass\n"
        "{end}\n"
        "def mean(xs):\n    return 0\n\ndef total(xs):\n    return sum(xs)\n"
    )
    ends = {
        "exit": "os._exit(0)",
        "kill-parent": "os.kill(os.getppid(), signal.SIGKILL)",
        "kill-group": "os.killpg(0, signal.SIGKILL)",
    }
    try:
        for name, end in ends.items():
            env.reset(seed=0)
            env.harbor._ws.write("stats.py", forge.replace("{end}", end).encode())
            _, reward, done, _, info = env.step(Message("assistant", "done"))
            assert done and reward == 0.0, (name, info)
    finally:
        env.close()


_FORGE = """import os
for d in ("/logs/verifier", "/work/logs/verifier"):
    try:
        os.makedirs(d, exist_ok=True)
        open(d + "/reward.txt", "w").write("1")
        open(d + "/reward.json", "w").write('{"reward": 1}')
    except OSError:
        pass
"""


@pytest.mark.parametrize("name", BUNDLED)
def test_modules_in_the_working_directory_do_not_run_as_the_tests_python(
    name: str, backend: str
) -> None:
    """The agent leaves modules named like what a test's Python imports (json, csv, math, ...)
    in the working directory, each forging the reward and exiting cleanly at import."""
    env = envs.make(f"harbor:bundled/{name}", backend=backend)
    try:
        env.reset(seed=0)
        for mod in ("json", "csv", "math", "random", "re", "sitecustomize", "usercustomize"):
            env.harbor._ws.write(f"{mod}.py", (_FORGE + "os._exit(0)\n").encode())
        _, reward, done, _, info = env.step(Message("assistant", "done"))
        assert done and reward == 0.0, info
    finally:
        env.close()


# An unfixed `mean`, with code at import that aims at the grader instead of the task.
_UNFIXED = (
    "def mean(xs):\n    return sum(xs) / (len(xs) - 1)\n\ndef total(xs):\n    return sum(xs)\n"
)
_QUIET = "fd = os.open('/dev/null', os.O_RDWR)\nfor i in (0, 1, 2):\n    os.dup2(fd, i)\nos.closerange(3, 4096)\n"
_LOOP = (
    "end = time.time() + 8\nwhile time.time() < end:\n"
    + "".join("    " + line + "\n" for line in _FORGE.splitlines()[1:])
    + "    time.sleep(0.0005)\nos._exit(0)\n"
)
_GAMES = {
    # prints the values the old test compared against, last, at exit
    "atexit": "import atexit, sys\natexit.register(lambda: print('[4.0, 5.0, 1.5, 6]', flush=True))\n",
    # a daemon in a session of its own rewrites the reward file after test.sh wrote it
    "daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    + "".join("        " + x + "\n" for x in (_QUIET + _LOOP).splitlines())
    + "    os._exit(0)\n",
    # the same from a child left in test.sh's own process group
    "background": "import os, time\nif os.fork() == 0:\n"
    + "".join("    " + x + "\n" for x in (_QUIET + _LOOP).splitlines()),
}


@pytest.mark.parametrize("game", sorted(_GAMES))
def test_the_unfixed_module_earns_nothing_by_gaming_the_tests(game: str, backend: str) -> None:
    env = envs.make("harbor:bundled/fix-mean", backend=backend)
    try:
        env.reset(seed=0)
        env.harbor._ws.write("stats.py", (_GAMES[game] + _UNFIXED).encode())
        _, reward, done, _, info = env.step(Message("assistant", "done"))
        assert done and reward == 0.0, (game, info)
    finally:
        env.close()


def test_reward_json_wins_and_several_rewards_need_a_reward_key(tmp_path: Path) -> None:
    if _local_reason():
        pytest.skip(_local_reason() or "")
    task = _task(
        tmp_path,
        test="echo 0 > /logs/verifier/reward.txt\n"
        'echo \'{"reward": 0.5, "style": 1}\' > /logs/verifier/reward.json\n',
    )
    env = envs.make(f"harbor:{task}")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(Message("assistant", "done"))
    assert reward == 0.5 and info["rewards"] == {"reward": 0.5, "style": 1.0}
    (task / "tests" / "test.sh").write_text("true\n")  # writes nothing: 0, and says why
    env = envs.make(f"harbor:{task}")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(Message("assistant", "done"))
    assert reward == 0.0 and "no reward file" in info["error"]


def test_task_toml_timeouts_apply(tmp_path: Path) -> None:
    if _local_reason():
        pytest.skip(_local_reason() or "")
    task = _task(
        tmp_path, test="sleep 30\necho 1 > /logs/verifier/reward.txt\n", agent_s=2, verifier_s=2
    )
    env = envs.make(f"harbor:{task}")
    env.reset(seed=0)
    obs, _, _, truncated, info = env.step(bash("sleep 10; echo never"))
    assert "timed out" in obs.messages[0].content
    assert truncated and "timed out" in info["error"]  # budget spent: graded; tests overran


def test_task_toml_memory_and_storage_apply(tmp_path: Path, backend: str) -> None:
    """[environment] memory_mb and storage_mb are the limits of the agent's commands."""
    task = _task(tmp_path, test="echo 0 > /logs/verifier/reward.txt\n")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "[environment]\nmemory_mb = 128\nstorage_mb = 4\n")
    env = envs.make(f"harbor:{task}", backend=backend)
    try:
        env.reset(seed=0)
        alloc = "python -c 'x = bytearray({} << 20); print(\"allocated\")' 2>&1 | tail -1"
        write = "head -c {} /dev/zero > /tmp/big && echo written"
        for command, ok in ((alloc.format(40), True), (alloc.format(400), False)):
            obs, *_ = env.step(bash(command))
            assert ("allocated" in obs.messages[0].content) is ok, (command, obs.messages)
        for command, ok in ((write.format(2_000_000), True), (write.format(6_000_000), False)):
            obs, *_ = env.step(bash(command))
            assert ("written" in obs.messages[0].content) is ok, (command, obs.messages)
    finally:
        env.close()


def test_a_dockerfile_with_run_is_docker_only(tmp_path: Path) -> None:
    task = _task(
        tmp_path,
        "true\n",
        dockerfile="FROM ubuntu:24.04\nRUN apt-get install -y jq\nWORKDIR /app\n",
    )
    with pytest.raises(TaskError, match="line 2: 'RUN apt-get"):
        envs.make(f"harbor:{task}").reset(seed=0)


def test_not_a_task_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder"):
        envs.make(f"harbor:{tmp_path / 'nope'}")
    with pytest.raises(TaskError, match="holds no task folder"):
        envs.make(f"harbor:{tmp_path}")


def test_paths_are_rewritten_and_dockerfile_copies_planned() -> None:
    assert rewrite("cd /app && cat /app/x > /logs/verifier/reward.txt; ls /tests", "/app") == (
        "cd /work/repo && cat /work/repo/x > /work/logs/verifier/reward.txt; ls /work/tests"
    )
    assert rewrite("/apple /app2 x/app", "/app") == "/apple /app2 x/app"
    plan = plan_dockerfile("FROM x\nWORKDIR /srv\nENV A=1 B=2\nCOPY a b /srv/\nCOPY c d\n")
    assert plan.workdir == "/srv" and plan.env == {"A": "1", "B": "2"} and plan.blocker is None
    assert plan.copies == [("a", "/srv/"), ("b", "/srv/"), ("c", "/srv/d")]


def test_envs_check_runs_on_a_harbor_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    if _local_reason():
        pytest.skip(_local_reason() or "")
    assert main(["envs", "check", "harbor:bundled"]) == 0
    assert "PASS harbor:bundled (oracle ok" in capsys.readouterr().out


def test_envs_check_takes_env_and_kwargs_as_train_does(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["envs", "check", "--env", "harbor:bundled/fix-mean", "--kwarg", f"backend={backend}"]
    assert main(argv) == 0
    assert "PASS harbor:bundled/fix-mean (oracle ok" in capsys.readouterr().out
    assert main([*argv[:-1], "backend=nope"]) == 1  # the kwarg reaches the env
    assert "unknown backend 'nope'" in capsys.readouterr().out
    assert main([*argv[:-1], "backend"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().out


def _task(
    root: Path,
    test: str,
    dockerfile: str = "FROM agentrl-sandbox:base\nWORKDIR /app\nCOPY f.txt /app/\n",
    agent_s: float = 60,
    verifier_s: float = 60,
) -> Path:
    task = root / "t"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Do nothing in particular in /app.\n")
    (task / "task.toml").write_text(
        f"[agent]\ntimeout_sec = {agent_s}\n[verifier]\ntimeout_sec = {verifier_s}\n"
    )
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "environment" / "f.txt").write_text("hi\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    return task
