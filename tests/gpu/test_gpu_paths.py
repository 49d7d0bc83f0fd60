"""GPU paths (skipped without CUDA): bf16 + SDPA training step and weight sync through the
real Trainer, gradient checkpointing, and the Megatron backend against the torch backend."""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_trainer_step_with_checkpointing_and_weight_sync(tmp_path, tiny_model_dir) -> None:
    from agentrl.assembly import build_trainer
    from agentrl.config import TrainConfig, from_dict

    cfg = from_dict(TrainConfig, {
        "model": {"path": str(tiny_model_dir), "dtype": "bfloat16", "gradient_checkpointing": True},
        "data": {"env": "math/calc-easy-v0", "batch_size": 4, "eval_episodes": 0},
        "rollout": {"n": 4},
        "sampling": {"max_new_tokens": 16},
        "trainer": {"steps": 1, "device": "cuda", "out_dir": str(tmp_path), "tensorboard": False},
    })  # fmt: skip
    trainer = build_trainer(cfg)
    trainer.step = 1
    m = trainer.train_step()
    assert m["time/weight_sync"] < 1.0 and torch.isfinite(torch.tensor(m["loss"]))
    engine_w = trainer.c.rollout.engine.model.state_dict()
    for name, w in trainer.actor.named_weights():
        assert torch.equal(engine_w[name], w), name
    trainer.finish()


def test_megatron_logits_close_to_hf_in_bf16() -> None:
    pytest.importorskip("megatron.core")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.backends.megatron import MegatronBackend

    cfg = Qwen2Config(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    with torch.device("cuda"):
        hf = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    backend = MegatronBackend("cuda")
    try:
        wrapped = backend.prepare(copy.deepcopy(hf))
        ids = torch.randint(0, 1000, (2, 64), device="cuda")
        with torch.no_grad():
            ref, got = hf(input_ids=ids).logits.float(), wrapped(ids).float()
        assert float((got - ref).norm() / ref.norm()) < 2e-2
    finally:
        backend.close()


def test_packed_varlen_matches_padded_in_bf16(tiny_model_dir) -> None:
    """On CUDA in bf16 the packed forward uses torch's varlen flash kernel; it must agree
    with the padded SDPA forward within bf16 tolerance, and be the kernel actually used."""
    import sys
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from agentrl.models.packed_attention import enable_packed_attention, use_varlen
    from agentrl.trainer.logprobs import response_log_probs
    from agentrl.trainer.packing import PackedLogProbs

    sys.path.insert(0, str(Path(__file__).parents[1] / "trainer"))
    from trainer_synth import batch

    def load() -> torch.nn.Module:
        return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).cuda()

    b = batch([3, 2, 3], seed=4).to("cuda")
    padded, packed = load(), load()
    enable_packed_attention(packed)
    assert use_varlen(torch.zeros(1, device="cuda", dtype=torch.bfloat16))
    lp_a, _ = response_log_probs(padded, b)
    lp_b, _ = PackedLogProbs()(packed, b)
    mask = b.logit_index >= 0
    diff = (lp_a[mask] - lp_b[mask]).abs()
    assert float(diff.mean()) < 2e-2 and float(diff.max()) < 0.15
    lp_b.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in packed.parameters() if p.grad is not None)
