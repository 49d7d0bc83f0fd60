"""The traceable packed-attention custom op equals the eager packed branch.

CPU, float64 where exactness matters: the op's per-segment path and its written-out backward
must give the eager branch's outputs and autograd's gradients; torch's `opcheck` validates the
op's schema, fake implementation and autograd registration (what `torch.compile` relies on);
the longest length handed to it may be rounded up without changing anything.
"""

from __future__ import annotations

import torch

from agentrl.models.packed_attention import Segments, attend_segments, packed_kwargs
from agentrl.models.packed_attention_op import packed_causal_attention

LENGTHS = [4, 5, 1, 3]


def _inputs(dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    n = sum(LENGTHS)
    q = torch.randn(n, 4, 8, generator=g, dtype=dtype)  # [N, Hq, D]
    k, v = (torch.randn(n, 2, 8, generator=g, dtype=dtype) for _ in range(2))  # GQA: 2 kv heads
    cu = torch.tensor([0, *LENGTHS], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return q, k, v, cu


def test_op_matches_eager_branch_values_and_grads() -> None:
    q, k, v, cu = _inputs()
    leaves_a = [t.clone().requires_grad_(True) for t in (q, k, v)]
    leaves_b = [t.clone().requires_grad_(True) for t in (q, k, v)]
    heads_first = [t.transpose(0, 1) for t in leaves_a]
    ref = attend_segments(*heads_first, Segments(cu, max(LENGTHS)), 0.3).transpose(0, 1)
    out, lse = packed_causal_attention(*leaves_b, cu, max(LENGTHS), 0.3)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    assert out.is_contiguous() and lse.shape == (4, sum(LENGTHS))
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (ref * weights).sum().backward()
    (out * weights).sum().backward()
    for a, b in zip(leaves_a, leaves_b, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, atol=1e-10, rtol=1e-10)


def test_default_scale_and_float32() -> None:
    q, k, v, cu = (t.float() if t.is_floating_point() else t for t in _inputs())
    heads_first = [t.transpose(0, 1) for t in (q, k, v)]
    ref = attend_segments(*heads_first, Segments(cu, 0), None).transpose(0, 1)
    out, _ = packed_causal_attention(q, k, v, cu, 5, None)
    torch.testing.assert_close(out, ref)


def test_opcheck_schema_fake_and_autograd() -> None:
    q, k, v, cu = _inputs()
    args = (q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True), cu, 5, 0.3)
    torch.library.opcheck(torch.ops.agentrl.packed_causal_attention.default, args)


def test_rounded_up_longest_length_changes_nothing() -> None:
    """`packed_kwargs(bucket=True)` rounds the longest length up to a power of two (>= 16);
    the op reads it only as the flash grid size, never on the per-segment path, and the
    segment bounds stay exact."""
    exact = packed_kwargs([5, 17, 3], torch.device("cpu"))
    bucketed = packed_kwargs([5, 17, 3], torch.device("cpu"), bucket=True)
    assert exact["max_length_q"] == 17 and bucketed["max_length_q"] == 32
    assert packed_kwargs([3], torch.device("cpu"), bucket=True)["max_length_q"] == 16
    assert packed_kwargs([64], torch.device("cpu"), bucket=True)["max_length_q"] == 64
    assert torch.equal(exact["cu_seq_lens_q"], bucketed["cu_seq_lens_q"])
    q, k, v, cu = _inputs()
    a, _ = packed_causal_attention(q, k, v, cu, max(LENGTHS), None)
    b, _ = packed_causal_attention(q, k, v, cu, 16, None)
    assert torch.equal(a, b)
