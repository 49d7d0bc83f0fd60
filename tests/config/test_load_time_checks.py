"""Config mistakes that used to surface late: a group-relative estimator with one sample per
prompt (after the SFT bootstrap and the first eval) and a mistyped local model path (an
80-line loader traceback). Both are one `ConfigError` at load now."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.algorithms import ADV_ESTIMATORS
from agentrl.algorithms.advantages import AdvantageInput
from agentrl.assembly.validate import load_train_config
from agentrl.config import ConfigError, TrainConfig
from agentrl.models.paths import looks_local


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS))
def test_the_group_relative_trait_is_declared_where_it_holds(name: str) -> None:
    """Each estimator's `group_relative` trait matches what it does with a group of one."""
    one = torch.ones(1, 2)
    inp = AdvantageInput(
        token_rewards=one.clone(),
        mask=one.clone(),
        group_index=torch.zeros(1, dtype=torch.long),
        values=torch.zeros(1, 2),
        old_log_probs=torch.zeros(1, 2),
        ref_log_probs=torch.zeros(1, 2),
        baseline_rewards=torch.zeros(1),
        sum_pi_squared=one.clone(),
        is_weights=one.clone(),
    )
    try:
        ADV_ESTIMATORS[name](inp, TrainConfig().algorithm)
        refused = False
    except ValueError as e:
        refused = "needs >= 2 samples" in str(e)
    assert ADV_ESTIMATORS[name].group_relative is refused


@pytest.mark.parametrize(
    ("estimator", "needs_group"),
    [("grpo", True), ("rloo", True), ("gae", False), ("reinforce_plus_plus", False)],
)
def test_group_relative_estimators_refuse_one_sample(estimator: str, needs_group: bool) -> None:
    overrides = ["rollout.n=1", f"algorithm.adv_estimator={estimator}"]
    if needs_group:
        with pytest.raises(ConfigError, match=rf"rollout.n: 1 .*{estimator}.*group-relative"):
            load_train_config(None, overrides)
    else:
        assert load_train_config(None, overrides).rollout.n == 1


@pytest.mark.parametrize(
    "path", ["tiny:qwen2", "smollm2-135m-instruct", "Qwen/Qwen2.5-0.5B-Instruct", "hf://a/b/c"]
)
def test_presets_and_hub_ids_are_not_local_paths(path: str) -> None:
    assert not looks_local(path)


@pytest.mark.parametrize("path", ["/nope/dir", "./ckpt", "../ckpt", "~/ckpt", "a.gguf", "a/b/c"])
def test_paths_that_can_only_be_local_must_exist(path: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert looks_local(path)
    with pytest.raises(ConfigError, match=r"model.path: .*no such file or directory"):
        load_train_config(None, [f"model.path={path}"], local_files=True)
    (tmp_path / "ok").mkdir()
    load_train_config(None, [f"model.path={tmp_path / 'ok'}"], local_files=True)


def test_a_template_placeholder_still_loads_without_local_files() -> None:
    # configs/qwen2.5-0.5b-gpu.yaml ships `/path/to/...`; only the commands that load the
    # model (train, sft, selfplay, config show) ask for the file check.
    cfg = load_train_config(None, ["model.path=/path/to/Qwen2.5-0.5B-Instruct"])
    assert cfg.model.path.startswith("/path/to")


def test_load_model_names_the_missing_path() -> None:
    from agentrl.config import ModelConfig
    from agentrl.models.load import load_model

    with pytest.raises(ConfigError, match=r"model.path: '/nope/ckpt': no such file"):
        load_model(ModelConfig(path="/nope/ckpt"))
