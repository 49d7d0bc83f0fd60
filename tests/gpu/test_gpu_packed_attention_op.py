"""The traceable packed-attention op on CUDA (skipped without it): flash with native GQA gives
the eager packed branch's values and gradients, ignores a rounded-up longest length, and a
compiled update with it (one graph per layer, or per decoder) matches the eager default."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
LENGTHS = [37, 130, 5, 64]


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(0)
    n = sum(LENGTHS)
    q = torch.randn(n, 14, 64, generator=g, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(n, 2, 64, generator=g, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    cu = torch.tensor([0, *LENGTHS], dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    return q, k, v, cu


def test_flash_op_matches_eager_branch_and_ignores_bucketed_length() -> None:
    from agentrl.models.packed_attention import Segments, attend_segments
    from agentrl.models.packed_attention_op import packed_causal_attention

    q, k, v, cu = _inputs()
    a = [t.clone().requires_grad_(True) for t in (q, k, v)]
    b = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = attend_segments(*(t.transpose(0, 1) for t in a), Segments(cu, max(LENGTHS)), None)
    ref = ref.transpose(0, 1)
    out, lse = packed_causal_attention(*b, cu, max(LENGTHS), None)
    assert out.shape == q.shape and out.is_contiguous() and lse.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    weights = torch.randn_like(out)
    (ref * weights).sum().backward()
    (out * weights).sum().backward()
    for x, y in zip(a, b, strict=True):
        assert x.grad is not None and y.grad is not None and y.grad.shape == x.grad.shape
        torch.testing.assert_close(y.grad, x.grad, atol=5e-2, rtol=5e-2)
    bucketed, _ = packed_causal_attention(q, k, v, cu, 256, None)
    exact, _ = packed_causal_attention(q, k, v, cu, max(LENGTHS), None)
    # The same values; only a split-KV choice (torch >= 2.13 may key it on the length) could
    # change the summation order.
    torch.testing.assert_close(bucketed, exact, atol=1e-2, rtol=1e-2)


def test_direct_flash_call_matches_the_custom_op() -> None:
    """`packed_causal` calls the flash op directly on CUDA: same values and gradients as the
    custom op, also compiled (dynamo traces the aten op and its autograd formula)."""
    from agentrl.models import packed_attention_op as op

    q, k, v, cu = _inputs()
    results = []
    for direct, compiled in ((False, False), (True, False), (True, True)):
        op.DIRECT_FLASH["on"] = direct
        try:
            xs = [t.clone().requires_grad_(True) for t in (q, k, v)]
            fn = torch.compile(op.packed_causal, dynamic=True) if compiled else op.packed_causal
            out = fn(*xs, cu, 256, None)
            (
                out.float() * torch.linspace(-1, 1, out.numel(), device="cuda").view_as(out)
            ).sum().backward()
            results.append((out.detach(), *(x.grad for x in xs)))
        finally:
            op.DIRECT_FLASH["on"] = True
    ref = results[0]
    for got in results[1:]:
        for a, b in zip(ref, got, strict=True):
            assert b is not None and b.shape == a.shape
            torch.testing.assert_close(b, a, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("scope", ["layers", "decoder"])
def test_compiled_traced_update_matches_eager_in_bf16(tiny_model_dir: Path, scope: str) -> None:
    from transformers import AutoModelForCausalLM

    from agentrl.backends import TorchBackend
    from agentrl.trainer.actor import Actor
    from agentrl.trainer.levers import UpdateLevers

    sys.path.insert(0, str(Path(__file__).parents[1] / "trainer"))
    from trainer_synth import batch, configs

    results = []
    for compiled, levers in ((False, UpdateLevers()), (True, None)):
        levers = levers or UpdateLevers(traced_attention=True, host_pack=True, compile_scope=scope)  # type: ignore[arg-type]
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
        cfgs = configs(mini_batch_size=8, micro_batch_size=8, packing=True, compile=compiled,
                       device="cuda")  # fmt: skip
        actor = Actor(model, TorchBackend("cuda"), *cfgs, levers=levers)
        results.append(actor.update(batch([3, 2, 3], seed=1), torch.Generator().manual_seed(0)))
    eager, traced = results
    for key in ("entropy", "grad_norm"):
        assert abs(eager[key] - traced[key]) < 2e-2 * max(1.0, abs(eager[key])), key
