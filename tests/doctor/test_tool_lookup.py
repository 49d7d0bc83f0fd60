"""The `tool-data-lookup` probe, and the red team on the docker backend.

The probe's search runs with full Python inside the env's own code tool (`python`,
`run_tests`, `bash`): a tool that can reach the task's data is caught both ways (the leak is
named, the reward it buys is reported), and the shipped envs with such tools leak nothing it
reaches. Real envs, real sandboxes; the weak env (weak_envs.py) gives its interpreter the
dataset file, nothing else differs from a real tool.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.doctor import Finding, run_red_team
from agentrl.doctor.probes import Seen, applicable
from agentrl.doctor.scan import program, report
from agentrl.envs import HiddenData, load_env_module, make

WEAK = Path(__file__).with_name("weak_envs.py")


@pytest.fixture(scope="module", autouse=True)
def weak_envs() -> None:
    load_env_module(str(WEAK))


def _lookup(findings: list[Finding]) -> Finding:
    return next(f for f in findings if f.title.startswith("probe tool-data-lookup"))


def _docker_or_skip() -> None:
    from agentrl.sandboxes.docker_backend import docker_status

    ok, why = docker_status()
    if not ok:
        pytest.skip(f"docker backend unavailable: {why}")


def test_a_tool_that_reaches_the_data_is_caught() -> None:
    findings = run_red_team("weaktest/tool-sees-data-v0", episodes=2)
    f = _lookup(findings)
    assert f.level == "FAIL" and "hidden data" in f.title, f.detail
    assert "vaults.jsonl" in f.detail and "rewards [1, 1]" in f.detail  # named, and cashed
    assert findings[0].level == "FAIL" and "tool-data-lookup" in findings[0].detail


def test_the_search_never_carries_the_hidden_strings_in_plain_text() -> None:
    """The instrument's own program (a file in the sandbox, a process's argv) must not be
    where it finds the data; and a report survives the one-line channel of a test runner."""
    env = make("weaktest/tool-sees-data-v0")
    env.reset(seed=0)
    assert isinstance(env, HiddenData)
    secret = env.hidden_data()[0]
    src = program([secret], ["no_such_pkg"], ["vault number"], budget_s=0.5)
    assert secret not in src and json.dumps(secret) not in src
    line = "FAIL x: [error] ValueError: <<RT" + json.dumps({"leaks": ["/a"], "n": 1}) + "TR>>"
    assert report(line) == {"leaks": ["/a"], "n": 1}
    assert report("no report") is None and report("<<RT{broken TR>>") is None
    env.close()


def test_the_search_opens_archives_and_the_environment() -> None:
    """Planted copies of two hidden strings, gzipped deep in the tree, as a zip member and a
    tar.gz member, and in an environment variable, are each reported; one string alone (a
    coincidence) is not; a JSON record holding the prompt gives the adversary its answer."""
    import gzip
    import io
    import tarfile
    import zipfile

    from agentrl.sandboxes import ExecRequest, get_backend

    a, b = "assert frobnicate(12345) == 67890", "return sum(x ** 3 for x in xs) % 99991"
    text = f"{a}\n{b}\n".encode()
    zipped, tarred = io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("pkg/data.txt", text)
    with tarfile.open(fileobj=tarred, mode="w:gz") as t:
        info = tarfile.TarInfo("pkg-1.0/tests/test_x.py")
        info.size = len(text)
        t.addfile(info, io.BytesIO(text))
    record = json.dumps({"question": "How many widgets fit in box 77 today?", "answer": "4242"})
    files = {
        "x/y/z/cache.gz": gzip.compress(text),
        "w.whl": zipped.getvalue(),
        "sdist.tar.gz": tarred.getvalue(),
        "only_one.txt": a,
        "rows.jsonl": record + "\n",
    }
    clue = "How many widgets fit in box 77 today?"
    src = program([a, b], ["json", "no_such_pkg"], [clue], budget_s=3.0, cap=100_000)
    req = ExecRequest(src, files=files, env={"HINTS": f"{a} {b}"}, timeout_s=60, cpu_time_s=60)
    res = get_backend("local").run(req)
    out = report(res.stdout)
    assert out is not None, res.stderr[-2000:]
    leaks = " | ".join(out["leaks"])
    for place in ("cache.gz!", "w.whl!pkg/data.txt", "sdist.tar.gz!pkg-1.0/tests", "environ"):
        assert place in leaks, (place, out)
    assert "only_one.txt" not in leaks and "import json" in leaks  # a package that resolves
    assert out["answers"] == ["4242"]


def test_the_repair_adversary_restores_another_copy_of_the_named_file() -> None:
    """What `bash` + `submit` envs face: any other copy of the file the statement names (an
    sdist in a cache, here) is written over the workspace's, a fix the agent did not make."""
    import io
    import tarfile

    from agentrl.sandboxes import ExecRequest, get_backend

    fixed = b"def add(a, b):\n    return a + b\n"
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w:gz") as t:
        info = tarfile.TarInfo("pkg-1.0/pkg/core.py")
        info.size = len(fixed)
        t.addfile(info, io.BytesIO(fixed))
    files = {"repo/pkg/core.py": "def add(a, b):\n    return a - b\n"}
    files["cache/pkg-1.0.tar.gz"] = tarred.getvalue()  # type: ignore[assignment]
    src = program([], [], [], hint="pkg/core.py", restore=True, budget_s=2.0, cap=100_000)
    src = "import os\nos.chdir('repo')\n" + src + "print(open('pkg/core.py').read())\n"
    res = get_backend("local").run(ExecRequest(src, files=files, timeout_s=60, cpu_time_s=60))
    out = report(res.stdout)
    assert out is not None and out["restored"] == ["/work/cache/pkg-1.0.tar.gz!pkg-1.0/pkg/core.py"]
    assert res.stdout.rstrip().endswith("return a + b"), res.stdout[-500:]


@pytest.mark.parametrize(
    "env_id", ["code/humaneval-v0", "code/mixed-multiturn-v0", "swe/tiny-repo-v0"]
)
def test_envs_declare_hidden_strings_the_agent_is_never_shown(env_id: str) -> None:
    env = make(env_id)
    obs, _ = env.reset(seed=1)
    assert isinstance(env, HiddenData)
    hidden = env.hidden_data()
    assert hidden and all(len(h) >= 24 for h in hidden)
    shown = "\n".join(m.content for m in obs.messages)
    assert not [h for h in hidden if h in shown]
    env.close()


def test_the_probe_applies_wherever_a_tool_runs_code() -> None:
    for tools in ({"python"}, {"run_tests"}, {"bash", "submit"}):
        names = {p.name for p in applicable("any", frozenset(tools))}
        assert "tool-data-lookup" in names, tools
    assert "tool-data-lookup" not in {p.name for p in applicable("math", frozenset({"calc"}))}
    assert Seen("code", frozenset(), "").needles == []


@pytest.mark.parametrize(
    "env_id",
    [
        "code/humaneval-multiturn-v0",  # the default suite's; the full-budget searches: slow
        pytest.param("math/python-v0", marks=pytest.mark.slow),
        pytest.param("swe/tiny-repo-v0", marks=pytest.mark.slow),
    ],
)
def test_shipped_code_tools_reach_no_hidden_data(env_id: str) -> None:
    f = _lookup(run_red_team(env_id, episodes=1, probes=["tool-data-lookup"]))
    assert f.level == "OK", f"{f.title}: {f.detail}"
    assert "files read" in f.detail and "search(es)" in f.detail  # the search did run


@pytest.mark.docker
@pytest.mark.slow  # every probe at full budget on docker: CI's slow stage
def test_red_team_on_docker_pays_no_probe() -> None:
    _docker_or_skip()
    findings = run_red_team("code/mixed-multiturn-v0", episodes=1, backend="docker")
    bad = [f"{f.title}: {f.detail[:300]}" for f in findings if f.level == "FAIL"]
    assert not bad, bad
    ran = {f.title.split()[1] for f in findings if f.title.startswith("probe ")}
    assert {"tool-data-lookup", "init-memory", "data-lookup", "always-equal"} <= ran
    assert "backend docker" in findings[0].detail


@pytest.mark.docker
def test_docker_red_team_still_catches_a_weak_grader() -> None:
    """The backend option reaches the sandbox: a weak env without one is refused by name."""
    _docker_or_skip()
    with pytest.raises(ValueError, match="takes no backend"):
        run_red_team("weaktest/any-boxed-v0", backend="docker")
