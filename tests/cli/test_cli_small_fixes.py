"""Small command-line confusions: option prefixes, `--env` where documented, `config show`
taking the `--env-module` its own error recommends, the env id rule stated, verl keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli import build_parser, main
from agentrl.config import TrainConfig, from_dict

ENV_FILE = """
from agentrl.envs import Task, ToolEnv, register
from agentrl.types import Message
class E(ToolEnv):
    def new_task(self, rng, options):
        return Task([Message('user', 'say hi')], answer='hi')
    def score(self, final):
        return float(final.content == 'hi')
register('{id}', E, description='a test env')
"""


def test_long_options_are_not_matched_by_prefix() -> None:
    args = build_parser().parse_args(["doctor", "--env", "math/calc-v0"])
    assert (args.env, args.env_module) == ("math/calc-v0", [])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--env-mod", "x.py"])  # no abbreviations


def test_config_show_takes_env_module_and_env(tmp_path: Path, capsys) -> None:
    env_file = tmp_path / "my_env.py"
    env_file.write_text(ENV_FILE.format(id="clitest/hi-v0"))
    assert main(["config", "show", "--env", "clitest/nope-v0"]) == 2
    assert "--env-module FILE" in capsys.readouterr().err
    # sft.steps=0: the env has no oracle for the quickstart's SFT bootstrap (`train` says so too)
    argv = ["--env-module", str(env_file), "--env", "clitest/hi-v0", "sft.steps=0"]
    assert main(["config", "show", *argv]) == 0
    assert "env: clitest/hi-v0" in capsys.readouterr().out


def test_a_bad_env_id_states_the_rule(tmp_path: Path, capsys) -> None:
    from agentrl.envs import register

    with pytest.raises(ValueError, match=r"family: lowercase letters.*lowercase v"):
        register("Demo/reverse-v0", "x:y")


def test_a_verl_key_points_at_import_verl(capsys) -> None:
    assert main(["config", "show", "actor_rollout_ref.rollout.n=4"]) == 2
    err = capsys.readouterr().err
    assert "actor_rollout_ref: unknown key (a verl section" in err
    assert "agentrl config import-verl" in err


@pytest.mark.parametrize("overrides", [[], ["trainer.steps=3"]])
def test_config_show_without_a_file_shows_what_train_runs(capsys, overrides) -> None:
    """No config file: `agentrl train` runs the packaged quickstart, so `config show` shows it
    (not the schema's bare defaults), and its first line says so."""
    import yaml

    from agentrl.cli.train import resolve_config
    from agentrl.config import dump_yaml

    assert main(["config", "show", *overrides]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("# no config file: agentrl train's default, ")
        and "quickstart" in (out.splitlines()[0])
    )
    train = resolve_config(build_parser().parse_args(["train", *overrides]))
    assert yaml.safe_load(out) == yaml.safe_load(dump_yaml(train, changed_tuning_only=True))
    assert from_dict(TrainConfig, yaml.safe_load(out)) == train  # what is left out: defaults


def test_config_show_prints_tuning_only_where_it_differs(capsys) -> None:
    """`engine.hf.tuning` (the engine's speed knobs) is left out of `config show` at its
    defaults, and shows only the knobs a config changes; the printed config loads back to
    the same one."""
    import yaml

    from agentrl.config import FastHFTuning

    assert main(["config", "show"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert "tuning" not in shown["engine"]["hf"] and "fast" in shown["engine"]["hf"]
    assert main(["config", "show", "engine.hf.tuning.join_every=4"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["engine"]["hf"]["tuning"] == {"join_every": 4}
    assert from_dict(TrainConfig, shown).engine.hf.tuning == FastHFTuning(join_every=4)


def test_config_show_names_the_new_key_of_an_old_one(capsys) -> None:
    assert main(["config", "show", "engine.hf.decode_chunk=4"]) == 2
    err = capsys.readouterr().err
    assert "engine.hf.decode_chunk: moved to engine.hf.tuning.decode_chunk" in err
    assert len(err.strip().splitlines()) == 1
