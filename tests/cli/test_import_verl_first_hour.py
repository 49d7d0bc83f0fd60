"""`agentrl config import-verl` as a verl user runs it (issue 42, part 2, item 6).

A file whose Hydra `defaults:` list names files beside it is composed from them (verl's own
`ppo_trainer.yaml`); one that cannot be is refused with one line naming the entry (or taken
as it is with `--no-defaults`, said so); verl's composed file, with `name: ???` and tensor
parallelism, translates to a valid config; a config that fails validation is never written;
a shell script is "not a YAML mapping".
"""

from __future__ import annotations

from pathlib import Path

import yaml

from agentrl.cli import main

# A verl-shaped config folder (the layout of verl/trainer/config, in miniature).
FILES = {
    "ppo_trainer.yaml": """
defaults:
  - actor@actor_rollout_ref.actor: dp_actor
  - rollout@actor_rollout_ref.rollout: rollout
  - reward_manager@reward_manager
  - _self_
data:
  max_prompt_length: 256
  max_response_length: 128
  train_batch_size: 16
actor_rollout_ref:
  model:
    path: tiny:qwen2
  rollout:
    n: 4
algorithm:
  adv_estimator: grpo
trainer:
  total_training_steps: 7
  logger: [console]
""",
    "actor/dp_actor.yaml": """
defaults:
  - ../optim@optim: fsdp
  - actor
  - _self_
strategy: fsdp
""",
    "actor/actor.yaml": "ppo_mini_batch_size: 8\nclip_ratio_high: 0.28\nstrategy: megatron\n",
    "optim/fsdp.yaml": "lr: 3.0e-6\nweight_decay: 0.0\n",
    "rollout/rollout.yaml": "name: ???\ntemperature: 0.7\nn: 1\ntensor_model_parallel_size: 2\n",
    "reward_manager.yaml": "name: naive\n",
}


def verl_folder(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "ppo_trainer.yaml"


def test_defaults_are_composed_from_the_files_beside(tmp_path: Path, capsys) -> None:
    src, out = verl_folder(tmp_path / "config"), tmp_path / "agentrl.yaml"
    assert main(["config", "import-verl", str(src), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "defaults: composed from the YAML files beside" in err
    cfg = yaml.safe_load(out.read_text())
    assert cfg["optim"]["lr"] == 3.0e-6  # actor/dp_actor -> ../optim/fsdp.yaml
    assert cfg["algorithm"]["clip_high"] == 0.28  # actor/dp_actor -> actor/actor.yaml
    assert cfg["sampling"]["temperature"] == 0.7  # rollout/rollout.yaml
    assert cfg["rollout"]["n"] == 4  # the file's own value wins (_self_ last)
    assert cfg["trainer"]["mini_batch_size"] == 8 * 4  # verl counts prompts
    # rollout.name: ??? and tensor parallelism 2: the hf engine, no invalid engine.extra
    assert "actor_rollout_ref.rollout.name: ??? (verl sets it" in err
    assert "extra" not in cfg.get("engine", {})


def test_unresolvable_defaults_are_refused_or_skipped_on_request(tmp_path: Path, capsys) -> None:
    src = verl_folder(tmp_path / "config")
    (tmp_path / "config" / "optim" / "fsdp.yaml").unlink()
    out = tmp_path / "agentrl.yaml"
    assert main(["config", "import-verl", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert "defaults: cannot resolve {'../optim@optim': 'fsdp'} (no file" in err
    assert "_generated_ppo_trainer.yaml" in err and "--no-defaults" in err
    assert main(["config", "import-verl", str(src), "--out", str(out), "--no-defaults"]) == 0
    assert "--no-defaults: the file's Hydra defaults: list was not composed" in (
        capsys.readouterr().err
    )


def test_an_invalid_translation_is_never_written(tmp_path: Path, capsys) -> None:
    src, out = tmp_path / "verl.yaml", tmp_path / "agentrl.yaml"
    # grpo with one sample per prompt: a translation agentrl refuses to train
    src.write_text("algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  rollout:\n    n: 1\n")
    assert main(["config", "import-verl", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "config error in the translated config (nothing written): rollout.n: 1" in err
    assert not out.exists()


def test_a_shell_script_is_not_a_yaml_mapping(tmp_path: Path, capsys) -> None:
    for text in ("python3 -m verl.trainer.main_ppo data.train_batch_size=8\n", "a: b: c\n"):
        script = tmp_path / "run_grpo.sh"
        script.write_text(text)
        assert main(["config", "import-verl", str(script)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{script}: not a YAML mapping" in err
