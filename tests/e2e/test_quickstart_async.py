"""The shortened CPU quickstart (tests/e2e/test_quickstart.py's recipe) trained synchronously
and with `trainer.async.max_staleness: 1` from the same SFT'd weights, the rollout on a thread
of the trainer's process and in a child process (`trainer.async.producer`): pipelining must
not cost more than 10 points of held-out success (issue #21's CPU criterion). After
test_quickstart.py in one session, its RL phase (the same recipe, 10 synchronous steps from
the same SFT'd weights) is the synchronous run (conftest.py)."""

import json
from pathlib import Path

import pytest

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.trainer.export import export_hf

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["trainer.save_every=0", "trainer.eval_every=0", "trainer.tensorboard=false"]
COMMON += ["trainer.save_hf=false", "data.eval_episodes=64"]


def _cfg(cache: Path, *overrides: str) -> TrainConfig:
    path = ROOT / "configs" / "quickstart-cpu.yaml"
    return load_config(TrainConfig, path, [f"model.cache_dir={cache}", *COMMON, *overrides])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_async_quickstart_within_10_points_of_sync(tmp_path, agentrl_cache, quickstart_sft):
    model = quickstart_sft.get("model")  # test_quickstart.py's, when it ran first (conftest)
    after = {}
    if model is None:
        sft = build_trainer(_cfg(agentrl_cache, f"trainer.out_dir={tmp_path / 'sft'}"))
        sft.bootstrap_sft()
        model = tmp_path / "sft_model"
        export_hf(sft.actor.model, dict(sft.actor.named_weights()), sft.c.tokenizer, model)
        sft.c.close()
    elif "sync_after" in quickstart_sft:  # the same 10 synchronous steps from these weights
        after[0, "thread"] = quickstart_sft["sync_after"]["success_rate"]
    for k, producer in ((0, "thread"), (1, "thread"), (1, "process")):
        if (k, producer) in after:
            continue
        out = tmp_path / f"k{k}_{producer}"
        cfg = _cfg(
            agentrl_cache,
            f"model.path={model}",
            "sft.steps=0",
            "trainer.steps=10",
            f"trainer.async.max_staleness={k}",
            f"trainer.async.producer={producer}",
            f"trainer.out_dir={out}",
        )
        after[k, producer] = build_trainer(cfg).train()["success_rate"]
        metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == list(range(1, 11))
        if k:
            assert max(m["async/staleness_max"] for m in metrics) <= 1
    sync = after[0, "thread"]
    assert all(v >= sync - 0.10 for v in after.values()), after
    print(after)
