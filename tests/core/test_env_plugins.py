"""A broken `agentrl.envs` plugin (its module raises on import) is skipped and named; the
other plugins still load. Real entry points over real modules on disk; only the list of
installed distributions is swapped, as installing two throwaway packages would do."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import warnings

import gymnasium
import pytest

from agentrl.envs import registration

GOOD = """
from agentrl.envs import register, spec

def setup():
    register("plugintest/good-v0", spec("math/calc-v0").entry_point)
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    (tmp_path / "plugintest_bad.py").write_text("raise RuntimeError('half-installed plugin')\n")
    (tmp_path / "plugintest_good.py").write_text(GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = importlib.metadata.EntryPoints(
        [
            importlib.metadata.EntryPoint("bad", "plugintest_bad:setup", "agentrl.envs"),
            importlib.metadata.EntryPoint("good", "plugintest_good:setup", "agentrl.envs"),
        ]
    )
    monkeypatch.setattr(registration.importlib.metadata, "entry_points", lambda group: eps)
    monkeypatch.setattr(registration, "_plugins_loaded", False)
    monkeypatch.setattr(registration, "plugin_errors", {})
    monkeypatch.setattr(registration, "registry", dict(registration.registry))
    yield
    for name in ("plugintest_bad", "plugintest_good"):
        sys.modules.pop(name, None)
    gymnasium.registry.pop("plugintest/good-v0", None)


def test_a_broken_plugin_does_not_stop_the_others(plugins) -> None:
    with pytest.warns(RuntimeWarning, match="'bad'.*RuntimeError: half-installed plugin"):
        ids = [s.id for s in registration.all_specs()]
    assert "plugintest/good-v0" in ids
    assert list(registration.plugin_errors) == ["bad"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once, not on every lookup
        assert registration.spec("plugintest/good-v0").id == "plugintest/good-v0"
        with pytest.raises(KeyError, match="'bad'.*half-installed plugin"):
            registration.spec("plugintest/missing-v0")


def test_envs_list_names_the_broken_plugin(plugins, capsys) -> None:
    from agentrl.cli.envs import cmd_list

    with pytest.warns(RuntimeWarning):
        assert cmd_list(argparse.Namespace(json=True, env_module=[])) == 0
    out = capsys.readouterr()
    assert "plugintest/good-v0" in out.out
    assert "skipped plugin" in out.err and "half-installed plugin" in out.err
