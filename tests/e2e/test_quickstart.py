"""A shortened CPU quickstart: SFT on an imperfect teacher, then GRPO, on a fixed seed.

The full recipe (configs/quickstart-cpu.yaml) is measured over three seeds in BENCHMARKS.md;
this keeps the same recipe with fewer steps and asserts held-out success really rises.
"""

import json
from pathlib import Path

import pytest

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.trainer.export import export_hf
from agentrl.types import read_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_short_quickstart_improves_held_out_success(tmp_path, agentrl_cache, quickstart_sft):
    cfg = load_config(
        TrainConfig,
        ROOT / "configs" / "quickstart-cpu.yaml",
        [
            f"model.cache_dir={agentrl_cache}",
            f"trainer.out_dir={tmp_path}",
            "trainer.steps=10",
            "trainer.eval_every=0",
            "trainer.save_every=0",
            "trainer.tensorboard=false",
            "data.eval_episodes=64",
        ],
    )
    trainer = build_trainer(cfg)
    bootstrap = trainer.bootstrap_sft

    def bootstrap_and_keep() -> None:  # the SFT'd weights, for test_quickstart_async.py
        bootstrap()
        out = tmp_path / "sft_model"
        actor = trainer.actor
        export_hf(actor.model, dict(actor.named_weights()), trainer.c.tokenizer, out)
        quickstart_sft["model"] = out

    trainer.bootstrap_sft = bootstrap_and_keep  # type: ignore[method-assign]
    after = trainer.train()
    quickstart_sft["sync_after"] = after  # the synchronous baseline of test_quickstart_async.py
    rows = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
    before = rows[0]["success_rate"]
    assert rows[0]["step"] == 0 and rows[-1]["step"] == 10
    assert after["success_rate"] >= before + 0.2, (before, after)
    (untouched,) = [json.loads(x) for x in (tmp_path / "untouched.jsonl").read_text().splitlines()]
    assert untouched["step"] == 0 and untouched["episodes"] == 64  # the model as loaded
    assert untouched["success_rate"] <= before, (untouched, before)  # SFT does not hurt it
    metrics = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 11))
    assert metrics[-1]["tool_calls"] > metrics[0]["tool_calls"]
    early = sum(m["reward/mean"] for m in metrics[:3]) / 3
    late = sum(m["reward/mean"] for m in metrics[-3:]) / 3
    assert late > early, (early, late)
    assert list(tmp_path.rglob("*.png")), "reward curves are written"
    dumped = list(read_jsonl(tmp_path / "rollouts" / "step_000010.jsonl"))
    assert len(dumped) == 64 and all(
        len(t.metadata["trainer_logprobs"]) == len(t.response_ids) for t in dumped
    )
