"""CI gate for every registered env: each must pass `check_env` (API, seeding, tool schemas,
bad tool calls, and oracle-reaches-max where an oracle exists)."""

from __future__ import annotations

import pytest

from agentrl.envs import all_specs, check_env, make

IDS = [s.id for s in all_specs()]


@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id: str) -> None:
    try:
        env = make(env_id)
    except ImportError as e:  # an optional extra (e.g. agentrl[reasoning]) is not installed
        pytest.skip(f"{env_id}: {e}")
    try:
        check_env(env)
    finally:
        env.close()


def test_registry_is_documented() -> None:
    for s in all_specs():
        assert s.description, f"{s.id} needs a description for `agentrl envs list`"
        assert s.family, s.id


def test_enough_envs() -> None:
    assert len(IDS) >= 15, IDS
