"""`agentrl doctor --env ID --red-team`: no probe is paid by the shipped envs' rewards, and a
grader that trusts what the agent controls is caught, naming the probe that pays.

Real envs, real sandboxes; the weak envs (weak_envs.py) grade with the real sandbox too,
each with one deliberate hole, and each has an oracle the honest policy is paid by.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.doctor import Finding, run_red_team
from agentrl.doctor.probes import PROBES, applicable
from agentrl.envs import check_env, load_env_module, make

WEAK = Path(__file__).with_name("weak_envs.py")


@pytest.fixture(scope="module", autouse=True)
def weak_envs() -> None:
    load_env_module(str(WEAK))


def paying(findings: list[Finding]) -> dict[str, Finding]:
    return {
        f.title.split()[1]: f
        for f in findings
        if f.level == "FAIL" and f.title.startswith("probe ")
    }


def no_fail(findings: list[Finding]) -> None:
    bad = [f"{f.title}: {f.detail[:300]}" for f in findings if f.level == "FAIL"]
    assert not bad, bad


def test_calc_pays_no_probe() -> None:
    findings = run_red_team("math/calc-v0", episodes=2)
    no_fail(findings)
    ran = {f.title.split()[1] for f in findings if f.title.startswith("probe ")}
    # the tool-abuse and answer-format probes apply to a math env with a calculator
    assert {"tool-deep-args", "tool-huge-args", "many-boxed", "boxed-set"} <= ran
    assert not ran & {"data-lookup", "conftest-pass-all"}


@pytest.mark.parametrize("env_id", ["code/functions-v0", "code/humaneval-v0"])
def test_code_envs_pay_no_probe(env_id: str) -> None:
    findings = run_red_team(env_id, episodes=1)
    no_fail(findings)
    ran = {f.title.split()[1] for f in findings if f.title.startswith("probe ")}
    assert {"os-exit-after-defs", "data-lookup", "init-memory", "always-equal"} <= ran


def test_exit_code_grader_is_caught() -> None:
    assert check_env(make("weaktest/exit-code-v0"))["oracle"]  # the honest policy is paid
    pays = paying(run_red_team("weaktest/exit-code-v0", episodes=2))
    assert {"os-exit-after-defs", "exit-before-tests", "forged-report-then-exit"} <= set(pays)
    f = pays["os-exit-after-defs"]
    assert "--red-team --probe os-exit-after-defs" in f.fix and "os._exit(0)" in f.detail
    # answers without a program are not paid: the finding is about the hole, not the env
    assert not {"silent", "refuse", "echo-prompt"} & set(pays)


def test_readable_tests_are_found() -> None:
    assert check_env(make("weaktest/readable-tests-v0"))["oracle"]
    findings = run_red_team("weaktest/readable-tests-v0", episodes=2)
    assert set(paying(findings)) == {"data-lookup"}, [f.title for f in findings]
    assert findings[0].level == "FAIL" and "data-lookup" in findings[0].detail


def test_any_boxed_grader_is_caught() -> None:
    findings = run_red_team("weaktest/any-boxed-v0", episodes=2)
    assert set(paying(findings)) == {"many-boxed"}, [f.title for f in findings]


def test_probes_apply_by_declared_family_and_tools() -> None:
    names = {p.name for p in applicable("swe", frozenset({"bash", "submit", "view"}))}
    assert {"conftest-pass-all", "source-reflection", "tool-deep-args", "silent"} <= names
    assert not names & {"data-lookup", "many-boxed"}
    assert {p.name for p in applicable("games", frozenset())} >= {"silent", "guess"}
    assert all(p.kind in ("hack", "guess", "robustness") for p in PROBES.values())
    with pytest.raises(ValueError, match="no-such-probe"):
        applicable("math", frozenset(), ["no-such-probe"])


def test_cli_red_team_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["doctor", "--env-module", str(WEAK), "--env", "weaktest/any-boxed-v0"]
    code = main([*argv, "--red-team", "--probe", "many-boxed", "--probe", "guess", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [f["title"].split()[1] for f in out if f["level"] == "FAIL"][1:] == ["many-boxed"]
    assert {f["section"] for f in out} == {"red team"}
    assert main(["doctor", "--env", "math/calc-v0", "--red-team", "--probe", "refuse"]) == 0


def test_data_lookup_runs_a_reference_solution_it_can_read() -> None:
    """The lookup program finds a HumanEval-style record (prompt + canonical solution) in a
    readable file and answers with it: what a sandbox without hidden task data would pay."""
    from agentrl.doctor.programs import lookup
    from agentrl.sandboxes import ExecRequest, get_backend

    record = {
        "task_id": "x/0",
        "entry_point": "twice",
        "prompt": "def twice(x):\n",
        "canonical_solution": "    return 2 * x\n",
    }
    files = {"data/problems.jsonl": json.dumps(record) + "\n"}
    req = ExecRequest(lookup(["twice"]), check="assert twice(21) == 42", files=files)
    assert get_backend("local").run(req).verified
    req = ExecRequest(lookup(["twice"]), check="assert twice(21) == 42")
    assert not get_backend("local").run(req).verified


def test_repo_grader_trusting_pytest_in_the_workspace_is_caught() -> None:
    assert check_env(make("weaktest/repo-exit-code-v0"), seeds=(0,))["oracle"]
    probes = ["conftest-pass-all", "source-reflection", "source-exit", "submit-now"]
    findings = run_red_team("weaktest/repo-exit-code-v0", episodes=1, probes=probes)
    assert set(paying(findings)) == {"conftest-pass-all", "source-reflection", "source-exit"}


def test_stalls_are_bounded_and_crashes_reported() -> None:
    probes = ["silent", "refuse", "echo-prompt"]
    findings = run_red_team("weaktest/fragile-v0", probes=probes, episode_timeout_s=1.0)
    by = {f.title.split()[1]: f for f in findings[1:]}
    assert by["silent"].level == "WARN" and "stalls" in by["silent"].title
    assert by["refuse"].level == "FAIL" and "the grader choked" in by["refuse"].detail
    assert by["echo-prompt"].level == "OK"
    assert findings[0].level == "FAIL" and "refuse" in findings[0].detail
