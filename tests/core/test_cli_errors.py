"""A new user's bad inputs: each is one line on stderr naming the culprit, exit code 2, and
raised before any model loads (`load_model` is made to fail loudly if it is reached)."""

from __future__ import annotations

import pytest

from agentrl.cli import main


@pytest.fixture(autouse=True)
def no_model_load(monkeypatch):
    import agentrl.models.load as load

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the bad input was reported")

    monkeypatch.setattr(load, "load_model", boom)
    monkeypatch.setattr(load, "load_tokenizer", boom)


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_unknown_env_id_did_you_mean(capsys):
    err = _one_line_error(capsys, ["train", "--env", "math/calc-eazy-v0"])
    assert "data.env: unknown env id 'math/calc-eazy-v0'" in err
    assert "did you mean 'math/calc-easy-v0'" in err
    err = _one_line_error(capsys, ["train", "--env", "does/not-exist"])
    assert "unknown env id 'does/not-exist' (no close match)" in err


def test_missing_files(capsys, tmp_path):
    err = _one_line_error(capsys, ["train", "--config", str(tmp_path / "nope.yaml")])
    assert err.endswith("nope.yaml: no such config file")
    err = _one_line_error(capsys, ["train", "--env-module", str(tmp_path / "my_env.py")])
    assert "--env-module" in err and "my_env.py: no such file" in err
    err = _one_line_error(capsys, ["sft", "--env-module", "nope.py", "--steps", "3"])
    assert "nope.py: no such file" in err


def test_bad_yaml_names_line_and_column(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  steps: 3\n  out_dir: [oops\n")
    err = _one_line_error(capsys, ["train", "--config", str(bad)])
    assert f"{bad}:4:1: invalid YAML" in err
    err = _one_line_error(capsys, ["train", "trainer.steps=[1"])
    assert "trainer.steps=[1" in err and "not valid YAML" in err


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.steps=-1", "trainer.steps: -1 is out of range (must be >= 0)"),
        ("sampling.top_p=1.5", "sampling.top_p: 1.5 is out of range (must be > 0 and <= 1)"),
        ("rollout.n=0", "rollout.n: 0 is out of range (must be >= 1)"),
        ("algorithm.adv_estimator=grop", "unknown estimator 'grop' (did you mean 'grpo'"),
        ("algorithm.policy_loss=ppo_clp", "unknown policy loss 'ppo_clp' (did you mean 'ppo_clip'"),
        ("engine.kind=vlm", "engine.kind: 'vlm' is not one of ['hf', 'vllm', 'sglang'] (did you"),
        ("trainer.backend=fsdp", "(did you mean 'fsdp2'?)"),
        ("engine.extra.fsat=true", "engine.extra.fsat: not an option of engine.kind=hf (did you"),
        ("model.path=tiny:qwen3-smal", "unknown tiny preset 'tiny:qwen3-smal'"),
        ("data.env_kwargs.difficulty=3", "data.env_kwargs.difficulty: unknown env argument"),
        ("rollout.n=1", "rollout.n: 1 with algorithm.adv_estimator: grpo, which is group-rel"),
        ("model.path=/nonexistent/dir", "model.path: '/nonexistent/dir': no such file or dir"),
        ("model.path=./typo/ckpt", "model.path: './typo/ckpt': no such file or directory"),
    ],
)
def test_config_values_checked_at_load(capsys, override, expected):
    err = _one_line_error(capsys, ["train", override])
    assert expected in err, err
    assert main(["config", "show", override]) == 2  # `config show` rejects it too
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    "overrides", [["trainer=3", "trainer.steps=2"], ["trainer.steps=2", "trainer=3"], ["trainer=3"]]
)
def test_a_section_set_to_a_value_names_that_override(capsys, overrides):
    """`trainer=3` replaces the section with a number: the error names it, not a later
    `trainer.steps=2` that merely found no section left to set a key in."""
    err = _one_line_error(capsys, ["train", *overrides])
    assert "override 'trainer=3': trainer is a section (TrainerConfig), not a value" in err
    assert "trainer.steps=2" not in err


def test_sft_without_oracle_says_how_to_skip_it(capsys, tmp_path):
    env_file = tmp_path / "no_oracle.py"
    env_file.write_text(
        "from agentrl.envs import Task, ToolEnv, register\n"
        "from agentrl.types import Message\n"
        "class E(ToolEnv):\n"
        "    def new_task(self, rng, options):\n"
        "        return Task([Message('user', 'say hi')], answer='hi')\n"
        "    def score(self, final):\n"
        "        return float(final.content == 'hi')\n"
        "register('test/no-oracle-v0', E, description='a test env without an oracle')\n"
    )
    argv = ["train", "--env-module", str(env_file), "--env", "test/no-oracle-v0"]
    err = _one_line_error(capsys, [*argv, "sft.steps=10"])
    assert "test/no-oracle-v0 has none" in err and "sft.steps=0" in err


def test_resume_and_overwrite_conflict(capsys):
    err = _one_line_error(capsys, ["train", "--resume", "--overwrite"])
    assert "contradict" in err
