"""`agentrl sft`: oracle demos → SFT → an HF checkpoint directory `model.path` accepts."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from agentrl.chat import ChatFormat
from agentrl.cli import main
from agentrl.config import TrainConfig, load_config
from agentrl.models.load import load_model, load_tokenizer

SMALL = ["model.path=tiny:qwen2", "sft.demos=16", "sft.batch_size=8", "trainer.device=cpu"]


def test_sft_writes_a_loadable_checkpoint_and_learns(tmp_path: Path) -> None:
    out = tmp_path / "sft-calc"
    args = ["sft", "--env", "math/calc-easy-v0", "--steps", "20", "--out", str(out), *SMALL]
    assert main([*args, "sft.lr=3e-3"]) == 0
    losses = [json.loads(x)["loss"] for x in (out / "sft.jsonl").read_text().splitlines()]
    assert len(losses) == 20 and losses[-1] < 0.7 * losses[0]

    cfg = load_config(TrainConfig, None, [f"model.path={out}"])
    tuned = load_model(cfg.model, trainable=False)
    base = load_model(load_config(TrainConfig, None, SMALL[:1]).model, trainable=False)
    assert not torch.equal(tuned.lm_head.weight, base.lm_head.weight)
    chat = ChatFormat(load_tokenizer(cfg.model))  # the chat template travelled with it
    assert chat.tool_format == "hermes" and chat.stop_token_ids


def test_sft_with_lora_saves_merged_plain_weights(tmp_path: Path) -> None:
    out = tmp_path / "sft-lora"
    args = ["sft", "--env", "math/calc-easy-v0", "--steps", "2", "--out", str(out), *SMALL]
    assert main([*args, "model.lora.enabled=true"]) == 0
    assert not (out / "adapter_config.json").exists()
    cfg = load_config(TrainConfig, None, [f"model.path={out}"])
    names = [n for n, _ in load_model(cfg.model, trainable=False).named_parameters()]
    assert names and not any("lora" in n or "base_layer" in n for n in names)


def test_sft_needs_steps(capsys) -> None:
    assert main(["sft", "--env", "math/calc-easy-v0", *SMALL]) == 2
    assert "sft.steps must be > 0" in capsys.readouterr().err
