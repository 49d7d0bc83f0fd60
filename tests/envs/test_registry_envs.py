"""CI gate for every registered env: each must pass `check_env` (API, seeding, tool schemas,
bad tool calls, and oracle-reaches-max where an oracle exists)."""

from __future__ import annotations

import pytest

from agentrl.envs import all_specs, check_env, make

IDS = [s.id for s in all_specs()]
# What `check_env` must also report for these (one check_env run per env for the whole suite:
# the family test files asserted this on a second run of their own): the oracle reaches the
# max, and the SWE env's reward-hacking scripts are exactly these, each scored the minimum.
ORACLE = {
    "code/functions-v0",
    "code/stdio-v0",
    "code/mixed-multiturn-v0",
    "swe/tiny-repo-v0",
    "vision/count-shapes-v0",
    "vision/bar-chart-v0",
    "vision/zoom-v0",
}
ADVERSARIES = {"swe/tiny-repo-v0": {"no-op", "delete-tests", "conftest-pass-all", "early-exit"}}


@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id: str) -> None:
    try:
        env = make(env_id)
    except ImportError as e:  # an optional extra (e.g. agentrl[reasoning]) is not installed
        pytest.skip(f"{env_id}: {e}")
    try:
        report = check_env(env)
    finally:
        env.close()
    if env_id in ORACLE:
        assert report["oracle"] is True, report
    if env_id in ADVERSARIES:
        assert set(report["adversaries"]) == ADVERSARIES[env_id], report


def test_the_reports_checked_name_registered_envs() -> None:
    assert (ORACLE | set(ADVERSARIES)) <= set(IDS)


def test_registry_is_documented() -> None:
    for s in all_specs():
        assert s.description, f"{s.id} needs a description for `agentrl envs list`"
        assert s.family, s.id


def test_enough_envs() -> None:
    assert len(IDS) >= 15, IDS
