"""Padding-free packing gives the padded forward's log-probs, entropies and gradients.

Real tiny models (float32, CPU): the same multi-turn batch goes through the padded forward
and the packed one (`trainer.packing`); both must agree to float rounding, for log-probs,
entropy and every parameter's gradient of a loss over them, and a whole `Actor.update` must
move the weights identically.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_synth import batch, configs

from agentrl.backends import TorchBackend
from agentrl.models.packed_attention import check_packable, enable_packed_attention
from agentrl.trainer.actor import Actor, single_on_policy_pass
from agentrl.trainer.logprobs import response_log_probs
from agentrl.trainer.packing import PackedLogProbs, pack

SIZES = [3, 2, 3]


def _model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)


def test_pack_layout() -> None:
    b = batch(SIZES)
    p = pack(b, multiple=4)
    lengths = b.attention_mask.sum(1).tolist()
    assert sum(p.lengths) % 4 == 0 and p.lengths[: len(lengths)] == lengths
    assert p.input_ids.shape == (1, sum(p.lengths))
    # Each response token's packed logit position points at the token before it.
    for i in range(b.size):
        for j in range(b.responses.shape[1]):
            pos = int(p.logit_pos[i, j])
            if b.logit_index[i, j] < 0:
                assert pos == -1
            else:
                assert int(p.targets[pos]) == int(b.responses[i, j])
    # Positions restart at every sequence.
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0)
    assert all(int(p.position_ids[0, s]) == 0 for s in starts)


@pytest.mark.parametrize("preset", ["qwen2", "llama", "qwen3"])
def test_packed_matches_padded(preset: str, agentrl_cache: Path) -> None:
    from agentrl.models.tiny import build_tiny

    path = Path(build_tiny(preset, str(agentrl_cache)))
    b = batch(SIZES, seed=3)
    padded, packed = _model(path), _model(path)
    enable_packed_attention(packed)
    lp_a, ent_a = response_log_probs(padded, b)
    lp_b, ent_b = PackedLogProbs()(packed, b)
    mask = b.logit_index >= 0
    torch.testing.assert_close(lp_b[mask], lp_a[mask], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b[mask], ent_a[mask], atol=2e-5, rtol=1e-5)
    assert float(lp_b.detach()[~mask].abs().sum()) == 0.0
    weights = torch.randn(lp_a.shape, generator=torch.Generator().manual_seed(0))
    ((lp_a + 0.1 * ent_a) * weights).sum().backward()
    ((lp_b + 0.1 * ent_b) * weights).sum().backward()
    grads = dict(padded.named_parameters())
    for name, p in packed.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=5e-5, rtol=1e-4, msg=name)


def test_actor_update_packed_equals_padded(tiny_model_dir: Path) -> None:
    results = []
    for packing in (False, True):
        cfgs = configs(mini_batch_size=8, micro_batch_size=3, packing=packing)
        actor = Actor(_model(tiny_model_dir), TorchBackend("cpu"), *cfgs)
        b = batch(SIZES, seed=1)
        b.old_log_probs = actor.compute_log_probs(b)
        metrics = actor.update(b, torch.Generator().manual_seed(0))
        results.append((b.old_log_probs, metrics, dict(actor.model.named_parameters())))
    (old_a, m_a, p_a), (old_b, m_b, p_b) = results
    torch.testing.assert_close(old_b, old_a, atol=2e-5, rtol=1e-5)
    assert abs(m_a["loss"] - m_b["loss"]) < 1e-5 and m_a["grad_norm"] > 0
    for name, p in p_b.items():
        torch.testing.assert_close(p, p_a[name], atol=1e-5, rtol=1e-4, msg=name)


def test_unpackable_models_are_refused(agentrl_cache: Path) -> None:
    from agentrl.models.tiny import build_tiny

    gemma = _model(Path(build_tiny("gemma2", str(agentrl_cache))))
    assert check_packable(gemma)
    with pytest.raises(ValueError, match="trainer.packing"):
        enable_packed_attention(gemma)


def test_padded_forward_still_works_on_a_packed_model(tiny_model_dir: Path) -> None:
    """Outside a packed forward the attention is plain SDPA (Critic, SFT use padded rows)."""
    b = batch(SIZES, seed=2)
    plain, switched = _model(tiny_model_dir), _model(tiny_model_dir)
    enable_packed_attention(switched)
    torch.testing.assert_close(
        response_log_probs(switched, b)[0], response_log_probs(plain, b)[0], atol=1e-6, rtol=0
    )


def test_on_policy_update_without_old_log_probs(tiny_model_dir: Path) -> None:
    """A single on-policy pass may skip the old log-prob forward: same update either way."""
    results = []
    for precompute in (True, False):
        actor = Actor(_model(tiny_model_dir), TorchBackend("cpu"), *configs(mini_batch_size=8))
        assert single_on_policy_pass(actor.cfg, 8)
        b = batch(SIZES, seed=1)
        if precompute:
            b.old_log_probs = actor.compute_log_probs(b)
        metrics = actor.update(b, torch.Generator().manual_seed(0))
        results.append((metrics, dict(actor.model.named_parameters())))
    (m_a, p_a), (m_b, p_b) = results
    assert abs(m_a["loss"] - m_b["loss"]) < 1e-6
    for name, p in p_b.items():
        torch.testing.assert_close(p, p_a[name], atol=1e-6, rtol=1e-5, msg=name)


def test_segments_do_not_attend_to_each_other() -> None:
    """The packed kernel equals per-sequence causal attention, not one long causal row."""
    import torch.nn.functional as F

    from agentrl.models.packed_attention import Segments, attend_segments

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 9, 8, generator=g) for _ in range(3))
    k, v = k[:2], v[:2]  # GQA: 4 query heads over 2 kv heads
    seg = Segments(torch.tensor([0, 4, 9], dtype=torch.int32), 5)
    out = attend_segments(q, k, v, seg, None)

    def causal(a: int, b: int) -> torch.Tensor:
        kk, vv = (t[:, a:b].repeat_interleave(2, 0) for t in (k, v))
        return F.scaled_dot_product_attention(q[None, :, a:b], kk[None], vv[None], is_causal=True)

    torch.testing.assert_close(out, torch.cat([causal(0, 4)[0], causal(4, 9)[0]], dim=1))
    assert not torch.allclose(out[:, 4:], causal(0, 9)[0][:, 4:], atol=1e-3)


def test_packed_forward_runs_through_agentrl_attention(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every layer's attention is ours, also when gradient checkpointing recomputes it in
    backward (the segment boundaries travel as forward kwargs, not as ambient state)."""
    from agentrl.models import packed_attention

    calls = []
    real = packed_attention.attend_segments
    monkeypatch.setattr(packed_attention, "attend_segments", lambda *a: calls.append(1) or real(*a))
    model, plain = _model(tiny_model_dir), _model(tiny_model_dir)
    enable_packed_attention(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    b = batch(SIZES)
    lp, _ = PackedLogProbs()(model, b)
    lp.sum().backward()
    assert len(calls) == 2 * model.config.num_hidden_layers  # forward + recompute
    response_log_probs(plain, b)[0].sum().backward()
    grads = dict(plain.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=5e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("packing", [False, True])
def test_compiled_layers_update_like_eager(tiny_model_dir: Path, packing: bool) -> None:
    """`trainer.compile`: inductor-compiled decoder layers give the eager update."""
    results = []
    for compiled in (False, True):
        cfgs = configs(mini_batch_size=8, micro_batch_size=4, packing=packing, compile=compiled)
        actor = Actor(_model(tiny_model_dir), TorchBackend("cpu"), *cfgs)
        b = batch(SIZES, seed=1)
        metrics = actor.update(b, torch.Generator().manual_seed(0))
        results.append((metrics, dict(actor.model.named_parameters())))
    (m_a, p_a), (m_b, p_b) = results
    assert abs(m_a["loss"] - m_b["loss"]) < 1e-5
    for name, p in p_b.items():
        torch.testing.assert_close(p, p_a[name], atol=1e-5, rtol=1e-4, msg=name)
