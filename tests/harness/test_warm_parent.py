"""`rollout.harness.preload`: agent runs forked from a warm parent, not fresh interpreters.

Each claim is checked against the real thing: a real parent process, real forks, agents with
full Python (`warm_agents.py`). A forked run must look like a fresh one from inside (its
environment, directory, fds, process group, argv, a module-level value read at import), fail
the same ways, leave nothing running, and find nothing of another run in what it inherited:
the test reads the parent's whole memory while another run is live and looks for that run's
session.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentrl.config.schema import HarnessConfig
from agentrl.rollout.harness import AgentRun, run_agent, warm_parent
from agentrl.rollout.warm_parent import ParentError, WarmParent

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent
ROOT = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def agents_importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv("WARM_MARK", "from-the-trainer")
    monkeypatch.setenv("WARM_PID_DIR", str(tmp_path))


def cfg(agent: str, **kw: Any) -> HarnessConfig:
    return HarnessConfig(agent=f"warm_agents:{agent}", timeout_s=kw.pop("timeout_s", 60), **kw)


def parent_of(c: HarnessConfig) -> WarmParent:
    p = warm_parent(c)
    assert p is not None
    return p


async def run(c: HarnessConfig, session: str, parent: WarmParent | None, **task: Any) -> AgentRun:
    return await run_agent(c, {"prompt": "x", **task}, ROOT, session, parent)


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A probe's report without what differs between any two runs (pids, random draws, the
    run's own result path)."""
    out = {k: v for k, v in result.items() if k not in ("pid", "ppid", "random")}
    out["env"] = {k: v for k, v in result["env"].items() if k != "AGENTRL_RESULT"}
    return out


def test_a_forked_run_looks_like_a_fresh_one() -> None:
    fresh_cfg = cfg("probe")
    warm_cfg = cfg("probe", preload=["warm_preload"])

    async def go() -> tuple[AgentRun, list[AgentRun]]:
        parent = parent_of(warm_cfg)
        try:
            fresh = await run(fresh_cfg, "same", None)
            warm = await asyncio.gather(*(run(warm_cfg, s, parent) for s in ("same", "b", "c")))
        finally:
            await parent.close()
        return fresh, list(warm)

    fresh, warm = asyncio.run(go())
    assert fresh.status == "ok" and all(w.status == "ok" for w in warm), (fresh, warm)
    f, w = comparable(fresh.result), comparable(warm[0].result)
    assert w.pop("preloaded_elsewhere") is True  # imported once, in the parent
    assert f.pop("preloaded_elsewhere") is False
    assert w == f
    assert f["env"]["WARM_MARK"] == "from-the-trainer" and f["stdin"] == ""
    assert f["own_group"] and f["own_session"] and f["fds"] == [0, 1, 2, 3]
    # Imported per run: each run's module-level value is its own session's, not the first's.
    assert [r.result["base_at_import"] for r in warm] == [r.result["base_url"] for r in warm]
    assert len({r.result["base_url"] for r in warm}) == 3
    assert len({r.result["random"] for r in warm}) == 3  # reseeded per fork
    assert len({r.result["ppid"] for r in warm}) == 1  # one parent forked all three


def test_failures_read_as_from_a_fresh_interpreter() -> None:
    async def go(agent: str, preload: list[str]) -> AgentRun:
        c = cfg(agent, preload=preload)
        parent = warm_parent(c)
        try:
            return await run(c, "s", parent)
        finally:
            if parent is not None:
                await parent.close()

    for preload in ([], ["warm_preload"]):
        exited = asyncio.run(go("exits_3", preload))
        assert exited.status == "crash" and exited.error.startswith(
            "agent exited with status 3: leaving"
        ), exited
        raised = asyncio.run(go("raises", preload))
        assert raised.status == "crash", raised
        assert raised.error.startswith(
            "agent exited with status 1: ValueError: the agent's own bug"
        ), raised.error
        # A message of several lines is named by its exception line, not its last line.
        quoting = asyncio.run(go("raises_quoting", preload))
        assert quoting.error.startswith(
            "agent exited with status 1: RuntimeError: Error code: 500 - grammar rejected token 0\n"
        ), quoting.error


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _all_gone(pids: list[int], within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _pids(folder: Path) -> list[int]:
    return [int(p.name.removeprefix("agent-")) for p in folder.iterdir() if p.name[-1].isdigit()]


def test_nothing_a_run_started_outlives_it(tmp_path: Path) -> None:
    """A run that returns with a child still running, and one that hangs past the timeout:
    both leave no process behind."""
    c = cfg("spawns", preload=["warm_preload"], timeout_s=3)

    async def go() -> tuple[AgentRun, AgentRun]:
        parent = parent_of(c)
        try:
            return await run(c, "a", parent), await run(c, "b", parent, hang=True)
        finally:
            await parent.close()

    done, hung = asyncio.run(go())
    assert done.status == "ok" and done.result == {"answer": "spawned"}, done
    assert hung.status == "timeout" and "timeout_s=3" in hung.error, hung
    pids = _pids(tmp_path)
    assert len(pids) == 3  # two sleeps, one hanging agent
    assert _all_gone(pids)


def test_closing_the_parent_ends_its_runs(tmp_path: Path) -> None:
    c = cfg("spawns", preload=["warm_preload"])

    async def go() -> AgentRun:
        parent = parent_of(c)
        task = asyncio.ensure_future(run(c, "a", parent, hang=True))
        while len(_pids(tmp_path)) < 2:
            await asyncio.sleep(0.05)
        await parent.close()
        return await asyncio.wait_for(task, 30)

    ended = asyncio.run(go())
    assert ended.status == "crash" and "warm parent exited" in ended.error, ended
    assert _all_gone(_pids(tmp_path))


TRAINER = """
import asyncio, sys
from agentrl.config.schema import HarnessConfig
from agentrl.rollout.harness import run_agent, warm_parent

async def main():
    cfg = HarnessConfig(agent="warm_agents:spawns", timeout_s=600, preload=["warm_preload"])
    await run_agent(cfg, {"prompt": "x", "hang": True}, "http://127.0.0.1:9", "s", warm_parent(cfg))

asyncio.run(main())
"""


def test_a_killed_trainer_leaves_no_run(tmp_path: Path) -> None:
    """SIGKILL gives the trainer no chance to clean up: the parent sees its control pipe
    close and kills every run's group before it exits."""
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER])
    deadline = time.monotonic() + 120
    while len(_pids(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _pids(tmp_path)
    assert len(pids) == 2, "the run did not start"
    parent = _parent_of(next(p for p in tmp_path.iterdir() if p.name.startswith("agent-")))
    trainer.kill()
    trainer.wait(30)
    assert _all_gone([*pids, parent])


def _parent_of(marker: Path) -> int:
    pid = int(marker.name.removeprefix("agent-"))
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_dead_parent_fails_its_runs_and_the_next_run_restarts_it(tmp_path: Path) -> None:
    c = cfg("waits", preload=["warm_preload"])

    async def go() -> tuple[AgentRun, AgentRun, int, int]:
        parent = parent_of(c)
        try:
            await parent.start()
            first = parent.pid
            assert first is not None
            task = asyncio.ensure_future(run(c, "a", parent, until=str(tmp_path / "never")))
            await asyncio.sleep(0.5)
            os.kill(first, signal.SIGKILL)
            lost = await asyncio.wait_for(task, 30)
            (tmp_path / "go").touch()
            again = await run(c, "b", parent, until=str(tmp_path / "go"))
            second = parent.pid
            assert second is not None
            return lost, again, first, second
        finally:
            await parent.close()

    lost, again, first, second = asyncio.run(go())
    assert lost.status == "crash" and "warm parent exited (-9)" in lost.error, lost
    assert again.status == "ok" and again.result == {"answer": "waited"}, again
    assert first != second


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("no_such_module_xyz", "cannot import 'no_such_module_xyz': ModuleNotFoundError"),
        ("warm_threads", "started 1 thread(s)"),
    ],
)
def test_a_bad_preload_is_one_error_at_start(module: str, message: str) -> None:
    parent = parent_of(cfg("probe", preload=[module]))
    with pytest.raises(ParentError, match=re.escape(message)) as err:
        asyncio.run(parent.start())
    assert "rollout.harness.preload" in str(err.value)


def test_preload_needs_a_python_agent() -> None:
    with pytest.raises(ValueError, match="rollout.harness.preload forks `agent` runs"):
        HarnessConfig(command=["python", "agent.py"], preload=["json"])


def _memory(pid: int) -> bytes:
    """Every readable mapping of process `pid`, concatenated."""
    chunks = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r") or line.rstrip().endswith("[vvar]"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                chunks.append(mem.read(hi - lo))
            except (OSError, OverflowError, ValueError):
                continue  # a guard page, [vsyscall]
    return b"".join(chunks)


def test_the_parent_never_holds_another_runs_session(tmp_path: Path) -> None:
    """What every later run inherits is the parent's memory at its fork. While run A is live
    (and after run B was forked), the parent's memory has A's run folder (the scan works) but
    not A's session id, base URL or task: B, with full Python, could not find them in its own
    memory."""
    c = cfg("waits", preload=["warm_preload"])
    secret = f"sess-{uuid.uuid4().hex}"
    task_secret = f"task-{uuid.uuid4().hex}"
    found: dict[str, bool] = {}

    async def go() -> None:
        parent = parent_of(c)
        try:
            gate = tmp_path / "gate"
            a = asyncio.ensure_future(run(c, secret, parent, until=str(gate), note=task_secret))
            while not list(Path("/tmp").glob("agentrl-agent-*/stdout")):
                await asyncio.sleep(0.05)
            b = await run(cfg("probe", preload=["warm_preload"]), "b", parent)
            assert b.status == "ok", b
            assert parent.pid is not None
            mem = _memory(parent.pid)
            found["scan works"] = b"agentrl-agent-" in mem
            found["session"] = secret.encode() in mem
            found["task"] = task_secret.encode() in mem
            gate.touch()
            assert (await a).status == "ok"
        finally:
            await parent.close()

    asyncio.run(go())
    assert found == {"scan works": True, "session": False, "task": False}
