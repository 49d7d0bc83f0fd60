"""A Harbor task whose image installs its own tools into ``/usr`` runs on them (docker).

Real Harbor tasks build on an image with a userland (``FROM ubuntu``, ``RUN apt-get``, ``COPY
tool /usr/local/bin/``); before the ``image_userland`` mode the docker backend bound the host's
``/usr`` over the image's, so such a task's own oracle scored 0. Here the image is
``userland_image`` (a few host programs ``FROM scratch``, no registry) plus a tool in
``/usr/local/bin``, its data in ``/usr/share`` and an ``ENV`` the tool reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor_play import bash, play_oracle

import agentrl.envs as envs
from agentrl.types import Message

pytestmark = pytest.mark.docker

TOOL = """#!/bin/bash
# words of $1 that are not in the image's stop list, one count
tr -s ' \\n' '\\n\\n' < "$1" | grep -vxFf "$WORDTOOL_HOME/stop.txt" | grep -c .
"""


def _task(root: Path, image: str) -> Path:
    task = root / "wordtool"
    for d in ("environment", "tests", "solution"):
        (task / d).mkdir(parents=True)
    (task / "instruction.md").write_text(
        "Write the `wordcount` of /app/text.txt to /app/count.txt.\n"
    )
    (task / "task.toml").write_text("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n")
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {image}\nENV WORDTOOL_HOME=/usr/share/wordtool\nWORKDIR /app\n"
        "COPY wordcount /usr/local/bin/wordcount\n"
        "COPY stop.txt /usr/share/wordtool/stop.txt\nCOPY text.txt /app/text.txt\n"
    )
    (task / "environment" / "wordcount").write_text(TOOL)
    (task / "environment" / "wordcount").chmod(0o755)
    (task / "environment" / "stop.txt").write_text("the\na\nof\n")
    (task / "environment" / "text.txt").write_text("the cat of the house\na dog ate a bone\n")
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncd /app && wordcount text.txt > count.txt\n"
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"  # 5 words left once the image's stop list is applied
        'if [ "$(cat /app/count.txt)" = 5 ] && grep -qx of /usr/share/wordtool/stop.txt; then\n'
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    return task


def test_the_images_own_tools_run_and_the_oracle_scores_1(tmp_path: Path, userland_image: str):
    env = envs.make(f"harbor:{_task(tmp_path, userland_image)}", backend="docker")
    try:
        env.reset(seed=0)
        total, info = play_oracle(env)
        assert total == 1.0, (info, env.last_verdict)
        env.reset(seed=0)  # the image's own tools, data and ENV; no host Python on PATH
        obs, *_ = env.step(bash("command -v wordcount; wordcount text.txt; python -V"))
        seen = obs.messages[0].content
        assert seen.startswith("/usr/local/bin/wordcount\n5\n"), seen
        assert "python: command not found" in seen, seen
        _, reward, done, _, info = env.step(Message("assistant", "I am done."))
        assert done and reward == 0.0 and "error" not in info, info
        env.reset(seed=0)  # the image is read-only: its tools and data stay the task's
        obs, *_ = env.step(bash("echo > /usr/share/wordtool/stop.txt; touch /usr/local/bin/x"))
        assert obs.messages[0].content.count("Read-only file system") == 2, obs.messages
        env.reset(seed=0)  # a wrong count is not paid either
        env.step(bash("echo 4 > count.txt"))
        _, reward, done, _, info = env.step(Message("assistant", "done"))
        assert done and reward == 0.0, info
    finally:
        env.close()


def test_a_task_on_an_image_without_a_userland_keeps_the_hosts(tmp_path: Path) -> None:
    """``FROM agentrl-sandbox:base`` (the bundled tasks) has no shell: the host's stands in."""
    from agentrl.envs.harbor.sandbox import build
    from agentrl.envs.harbor.tasks import load_tasks
    from agentrl.sandboxes.docker_backend import DockerBackend, docker_status

    ok, why = docker_status()
    if not ok:
        pytest.skip(why)
    (task,) = load_tasks("bundled/fix-mean")
    backend = build(task, "docker").backend
    assert isinstance(backend, DockerBackend) and not backend.image_userland
