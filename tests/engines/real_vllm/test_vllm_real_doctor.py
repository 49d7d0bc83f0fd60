"""`agentrl doctor` with real vLLM installed: the vLLM version, its platform and the settings
that follow from it, and a FAIL for a model whose head size vLLM's CPU attention refuses."""

from __future__ import annotations

from typing import Any

import vllm_checks as checks

from agentrl.config import TrainConfig, load_config

pytestmark = checks.MARKS


def config(tmp_path: Any, model: str, *overrides: str) -> TrainConfig:
    from engine_helpers import CACHE

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("engine:\n  kind: vllm\n")
    extra = [f"model.path={model}", f"model.cache_dir={CACHE}", *overrides]
    return load_config(TrainConfig, cfg_file, extra)


def test_doctor_reports_vllm_platform_and_settings(tmp_path: Any, monkeypatch: Any) -> None:
    import vllm

    from agentrl.doctor.stack import check_stack

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    found = check_stack(config(tmp_path, "tiny:qwen2-small"))
    titles = [f.title for f in found]
    text = "\n".join(f"{f.level} {f.title} {f.detail}" for f in found)
    assert any(f"vLLM {vllm.__version__} (vllm-cpu) on platform cpu" in t for t in titles), text
    assert any("sleep mode: not available on cpu" in t for t in titles), text
    assert any("CPU KV cache: 1 GiB" in t for t in titles), text
    assert any("runs head_dim 32" in t for t in titles), text
    # The weight-sync path the engine would start with (`_vllm_sync`): 0.32's, and the user's.
    assert any("weight sync: weights by vLLM's weight transfer" in t for t in titles), text
    assert any(t.endswith("pause mode keep, vLLM labels each token's weights") for t in titles)
    found = check_stack(config(tmp_path, "tiny:qwen2-small", "engine.extra.pause_mode=abort"))
    assert any("weight sync:" in f.title and "pause mode abort" in f.title for f in found)
    assert not [f for f in found if f.level == "FAIL"], text  # no GPU needed for vllm-cpu


def test_doctor_fails_head_dim_16_on_cpu(tmp_path: Any) -> None:
    from agentrl.doctor.stack import check_stack

    found = check_stack(config(tmp_path, "tiny:qwen2"))
    fails = [f for f in found if f.level == "FAIL"]
    assert len(fails) == 1 and "head_dim 16" in fails[0].detail, fails
