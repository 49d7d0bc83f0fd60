"""The fused head (`trainer.update_path: fused`) equals the materialized lm-head path.

Real tiny models on CPU: log-probs, entropies and every parameter's gradient agree for the
padded and the packed forward (qwen2 and llama presets), and a whole `Actor.update` moves the
weights identically and reports the same metrics, with and without LoRA and gradient
checkpointing. The op itself is checked against the plain product + chunked log-softmax in
float32 (several uneven chunks, temperature) and bf16.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from trainer_synth import batch, configs

import agentrl.trainer.fused_head as fused_head
from agentrl.backends import TorchBackend
from agentrl.config import LoraConfig, ModelConfig
from agentrl.models.load import load_model
from agentrl.models.packed_attention import enable_packed_attention
from agentrl.trainer.actor import Actor
from agentrl.trainer.chunked_logprobs import chunked_token_log_probs
from agentrl.trainer.fused_head import FusedHead, fused_token_log_probs
from agentrl.trainer.logprobs import response_log_probs
from agentrl.trainer.packing import PackedLogProbs

SIZES = [3, 2, 3]


def _op_pair(dtype: torch.dtype, temperature: float, compiled: bool = False) -> tuple:
    torch.manual_seed(0)
    h = (torch.randn(2, 7, 16) * 2).to(dtype)
    w = torch.randn(300, 16).to(dtype)
    tok = torch.randint(0, 300, (2, 7))
    g1, g2 = torch.randn(2, 7), torch.randn(2, 7)
    out = []
    for fused in (False, True):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        if fused:
            lp, ent = fused_token_log_probs(hh, ww, tok, temperature, compiled)
        else:
            lp, ent = chunked_token_log_probs(F.linear(hh, ww), tok, temperature)
        ((lp * g1).sum() + (ent * g2).sum()).backward()
        out.append((lp, ent, hh.grad, ww.grad))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [300 * 4, 1 << 28])  # 5 uneven chunks of 3 rows / one chunk
def test_op_matches_materialized_fp32(
    temperature: float, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fused_head, "CHUNK_ELEMENTS", chunk - 300)
    (a, b) = _op_pair(torch.float32, temperature)
    # The entropy sums p * log p over logits up to ~30 in size: the logsumexp's float32
    # rounding, split differently by the chunks, reached 3.2e-5 on an AVX2 AMD EPYC host.
    atol = {"entropy": 1e-4}
    for name, x, y in zip(("logp", "entropy", "grad_hidden", "grad_weight"), b, a, strict=True):
        torch.testing.assert_close(x, y, atol=atol.get(name, 1e-5), rtol=1e-5, msg=name)


def test_op_matches_materialized_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16: the same per-row products; the weight gradient summed over chunks in float32
    is at least as close to the float32 truth as the one-product bf16 gradient."""
    monkeypatch.setattr(fused_head, "CHUNK_ELEMENTS", 900)
    (a, b) = _op_pair(torch.bfloat16, 1.0)
    torch.testing.assert_close(b[0], a[0], atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(b[1], a[1], atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(b[2].float(), a[2].float(), atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(b[3].float(), a[3].float(), atol=3e-2, rtol=2e-2)


def test_compiled_op_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_head, "CHUNK_ELEMENTS", 900)
    (a, b) = _op_pair(torch.float32, 0.7, compiled=True)
    # inductor's product may sum in another order; logits of ~10 amplify that in softmax
    for x, y in zip(b, a, strict=True):
        torch.testing.assert_close(x, y, atol=1e-4, rtol=1e-4)


def _tiny(preset: str, cache: Path, **model: object) -> torch.nn.Module:
    from agentrl.models.tiny import build_tiny

    torch.manual_seed(0)  # the same LoRA init for both paths
    path = str(build_tiny(preset, str(cache)))
    return load_model(ModelConfig(path=path, **model))  # type: ignore[arg-type]


def _assert_paths_agree(make_model: Callable[[], torch.nn.Module], packing: bool = False) -> None:
    """The materialized and the fused path on fresh copies of one model: log-probs, entropies
    and every parameter's gradient of a weighted sum of both."""
    b = batch(SIZES, seed=3)
    results = []
    for fused in (False, True):
        model = make_model()
        assert FusedHead.of(model) is not None
        if packing:
            enable_packed_attention(model)
            lp, ent = PackedLogProbs(fused=fused)(model, b, 0.8)
        else:
            lp, ent = response_log_probs(model, b, 0.8, fused=fused)
        weights = torch.randn(lp.shape, generator=torch.Generator().manual_seed(0))
        ((lp + 0.1 * ent) * weights).sum().backward()
        results.append((lp, ent, {n: p.grad for n, p in model.named_parameters()}))
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=1e-5)
    for name, g in g_b.items():
        torch.testing.assert_close(g, g_a[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("preset", ["qwen2", "llama"])
@pytest.mark.parametrize("packing", [False, True])
def test_forward_values_and_grads_match(preset: str, packing: bool, agentrl_cache: Path) -> None:
    _assert_paths_agree(lambda: _tiny(preset, agentrl_cache), packing)


@pytest.mark.parametrize(
    ("packing", "lora", "checkpointing"),
    [(False, False, False), (True, False, False), (True, True, False), (False, True, True),
     (True, False, True)],
)  # fmt: skip
def test_actor_update_matches(
    packing: bool, lora: bool, checkpointing: bool, agentrl_cache: Path
) -> None:
    extra = {"gradient_checkpointing": checkpointing}
    if lora:
        extra["lora"] = LoraConfig(enabled=True, target_modules=["all-linear"])
    results = []
    for path in ("materialized", "fused"):
        cfgs = configs(mini_batch_size=8, micro_batch_size=3, packing=packing, update_path=path)
        cfgs[0].entropy_coef = 0.01  # the entropy's gradient too
        actor = Actor(_tiny("qwen2", agentrl_cache, **extra), TorchBackend("cpu"), *cfgs)
        actor.defer_metrics = path == "fused"  # and the per-micro-batch metric reads
        b = batch(SIZES, seed=1)
        b.old_log_probs = actor.compute_log_probs(b) - 0.05  # ratios away from 1: clipping
        metrics = actor.update(b, torch.Generator().manual_seed(0))
        assert all(type(v) is float for v in metrics.values())
        params = {n: p.detach().clone() for n, p in actor.model.named_parameters()}
        results.append((b.old_log_probs, metrics, params))
    (old_a, m_a, p_a), (old_b, m_b, p_b) = results
    torch.testing.assert_close(old_b, old_a, atol=1e-5, rtol=1e-5)
    assert m_a.keys() == m_b.keys() and m_a["grad_norm"] > 0
    for k in m_a:
        assert m_b[k] == pytest.approx(m_a[k], rel=1e-4, abs=1e-6), k
    # Adam divides by √v: a near-zero gradient's rounding moves its weight by up to ~lr/100
    for name, p in p_b.items():
        torch.testing.assert_close(p, p_a[name], atol=1e-5, rtol=1e-4, msg=name)


def _tiny_gemma3(softcap: float | None) -> torch.nn.Module:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=4,
        max_position_embeddings=128, final_logit_softcapping=softcap,
    )  # fmt: skip
    return Gemma3ForCausalLM(cfg).float()


def test_gemma3_without_softcapping_is_fused_and_matches() -> None:
    """Gemma 3 (the 270M preset has no logit soft-capping) takes the fused path, with the
    same log-probs, entropies and gradients as its materialized logits; with soft-capping set
    its head is not plain and it stays materialized."""
    assert FusedHead.of(_tiny_gemma3(30.0)) is None
    _assert_paths_agree(lambda: _tiny_gemma3(None))


def test_sharded_backends_and_plain_heads_only(agentrl_cache: Path) -> None:
    """FSDP2 (sharded parameters) runs materialized; so do an lm-head with a bias and a model
    whose forward changes the logits after the head (Gemma-2's soft-capping)."""
    from agentrl.backends.fsdp2 import FSDP2Backend
    from agentrl.backends.megatron import MegatronBackend

    assert TorchBackend.plain_modules
    assert not FSDP2Backend.plain_modules and not MegatronBackend.plain_modules
    model = _tiny("qwen2", agentrl_cache)
    model.lm_head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features)
    assert FusedHead.of(model) is None
    assert FusedHead.of(torch.nn.Linear(2, 2)) is None
    assert FusedHead.of(_tiny("gemma2", agentrl_cache)) is None
