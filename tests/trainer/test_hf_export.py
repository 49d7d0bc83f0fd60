"""Checkpoints a user can take away: every kept checkpoint and `final/` load with the real
libraries (`AutoModelForCausalLM`, `AutoTokenizer`, `PeftModel`) and compute exactly the
trained policy; `agentrl export` rebuilds the same directory from `state.pt`; the run folder
keeps its resolved `config.yaml`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.assembly import build_trainer
from agentrl.cli import main
from agentrl.config import TrainConfig, load_config
from agentrl.trainer import Trainer

IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250]])


def _trainer(out: Path, *extra: str) -> Trainer:
    overrides = [
        "model.path=tiny:qwen2",
        "trainer.steps=2",
        "trainer.save_every=1",
        "trainer.device=cpu",
        "trainer.tensorboard=false",
        f"trainer.out_dir={out}",
        "data.env=math/calc-easy-v0",
        "data.batch_size=1",
        "data.eval_episodes=0",
        "rollout.n=2",
        "sampling.max_new_tokens=6",
        "optim.lr=0.05",
        "algorithm.entropy_coef=0.1",  # a gradient even when every reward is 0
        *extra,
    ]
    return build_trainer(load_config(TrainConfig, None, overrides))


def _logits(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _check_hf_dir(path: Path, expected: torch.Tensor) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"):
        assert (path / name).exists(), f"{path} lacks {name}"
    model = AutoModelForCausalLM.from_pretrained(path)
    torch.testing.assert_close(_logits(model), expected, atol=1e-5, rtol=1e-5)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_full_run_writes_loadable_checkpoints_final_and_config(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    policy = trainer.actor.model
    trainer.train()
    final = _logits(policy)
    _check_hf_dir(tmp_path / "final", final)
    kept = sorted((tmp_path / "checkpoints").glob("step_*"))
    assert [p.name for p in kept] == ["step_000001", "step_000002"]
    for ckpt in kept:
        assert (ckpt / "state.pt").exists() and (ckpt / "hf" / "config.json").exists()
    _check_hf_dir(kept[-1] / "hf", final)
    step1 = AutoModelForCausalLM.from_pretrained(kept[0] / "hf")
    assert not torch.allclose(_logits(step1), final, atol=1e-4), "step 1 equals step 2"
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert cfg["trainer"]["steps"] == 2 and cfg["model"]["path"] == "tiny:qwen2"

    out = tmp_path / "exported"
    assert main(["export", str(tmp_path), "--step", "1", "--out", str(out)]) == 0
    _check_hf_dir(out, _logits(step1))
    assert main(["export", str(tmp_path), "--step", "7", "--out", str(out)]) == 2


def test_lora_run_writes_adapter_and_merged_model(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    lora = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8"]
    lora += ["model.lora.target_modules=[q_proj, v_proj, o_proj]", "trainer.steps=1"]
    trainer = _trainer(tmp_path, *lora)
    trainer.train()
    expected = _logits(trainer.actor.model)
    _check_hf_dir(tmp_path / "final", expected)  # merged: no peft needed to load it
    adapter = tmp_path / "final" / "adapter"
    assert (adapter / "adapter_config.json").exists()
    base = AutoModelForCausalLM.from_pretrained(trainer.c.rollout.engine.model.name_or_path)
    with_adapter = peft.PeftModel.from_pretrained(base, adapter)
    torch.testing.assert_close(_logits(with_adapter), expected, atol=1e-5, rtol=1e-5)

    out = tmp_path / "exported"
    assert main(["export", str(tmp_path), "--out", str(out)]) == 0
    _check_hf_dir(out, expected)
    assert (out / "adapter" / "adapter_config.json").exists()


def test_export_names_a_folder_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not a run folder" in capsys.readouterr().out
