"""One table of id prefixes (`agentrl.envs.interop.PREFIXES`): every prefix resolves through
it, an unknown prefix or a missing package is one line saying what to do, `vf:` and
`verifiers:` are one family, and `gym:` plays Gymnasium's own text envs."""

from __future__ import annotations

import json

import pytest

import agentrl.envs as envs
from agentrl.cli import main
from agentrl.envs.interop import PREFIXES, Prefix, install_hint, missing_modules, resolve
from agentrl.types import Message, ToolCall


def test_every_prefix_in_the_table_resolves_to_its_family() -> None:
    assert set(PREFIXES) == {"harbor", "ors", "gym", "textarena", "skyrl", "openenv", "vf"}
    for name in PREFIXES:
        spec = resolve(f"{name}:x")
        assert spec is not None and spec.family == name
    assert resolve("verifiers:m:C").family == "vf"  # the old prefix still works
    assert resolve("math/calc-v0") is None  # agentrl's own ids are untouched


def test_unknown_prefix_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(KeyError) as e:
        envs.make("hf:some/thing")
    msg = str(e.value.args[0])
    assert "\n" not in msg and "unknown prefix 'hf:'" in msg and "harbor:" in msg
    with pytest.raises(KeyError, match="give a Gymnasium id"):
        envs.make("gym:")


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Prefix("nopkg", "x:Y", "nopkg", ("agentrl_no_such_module",), "anything", "in-process")
    monkeypatch.setitem(PREFIXES, "nopkg", fake)
    assert missing_modules(fake) == ["agentrl_no_such_module"]
    with pytest.raises(ImportError) as e:
        envs.make("nopkg:thing")
    msg = str(e.value)
    assert "\n" not in msg and "pip install 'agentrl[nopkg]'" in msg
    assert install_hint(PREFIXES["gym"]) == "pip install agentrl"


def test_envs_list_all_shows_every_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "list", "--all", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {p["prefix"]: p for p in out["prefixes"]}
    assert set(rows) == set(PREFIXES) and out["envs"]
    assert rows["harbor"]["installed"] and rows["harbor"]["count"] == 7  # bundled, its 5, family
    assert "harbor:bundled/count-errors" in rows["harbor"]["examples"]
    assert rows["gym"]["installed"] and "gym:FrozenLake-v1" in rows["gym"]["examples"]
    for p in rows.values():
        assert p["installed"] or p["install"].startswith("pip install 'agentrl[")


def test_gym_frozenlake_played_through_the_games_adapter_reaches_the_goal() -> None:
    from agentrl.envs.games.adapter import GymTextEnv

    env = envs.make("gym:FrozenLake-v1", env_kwargs={"is_slippery": False})
    assert isinstance(env, GymTextEnv) and env.spec_id == "gym:FrozenLake-v1"
    obs, _ = env.reset(seed=0)
    assert [t["function"]["name"] for t in obs.tools] == ["act"]
    total, done = 0.0, False
    # 4x4 map SFFF/FHFH/FFFH/HFFG: down, down, right, right, down, right (1=down, 2=right)
    for move in [1, 1, 2, 2, 1, 2]:
        call = ToolCall("act", {"action": move}, id=f"c{move}")
        obs, reward, done, truncated, info = env.step(Message("assistant", "", tool_calls=[call]))
        total += reward
    assert done and total == 1.0


def test_gym_ids_with_continuous_actions_are_refused() -> None:
    with pytest.raises(TypeError, match="Discrete or Text action space"):
        envs.make("gym:Pendulum-v1")


def test_train_names_a_missing_extra_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Prefix("nopkg", "x:Y", "nopkg", ("agentrl_no_such_module",), "anything", "in-process")
    monkeypatch.setitem(PREFIXES, "nopkg", fake)
    assert main(["train", "--env", "nopkg:thing", "trainer.steps=1"]) != 0
    err = capsys.readouterr().err
    assert "data.env: 'nopkg:thing' needs agentrl_no_such_module (not installed)" in err
    assert "pip install 'agentrl[nopkg]'" in err and "Traceback" not in err
