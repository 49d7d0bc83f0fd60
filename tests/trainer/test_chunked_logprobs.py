"""Chunked log-probs/entropy and the lm_head skip equal the plain float32 computation."""

from __future__ import annotations

import pytest
import torch

import agentrl.trainer.chunked_logprobs as chunked
from agentrl.trainer.logprobs import token_log_probs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_matches_plain_values_and_grads(
    temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 3000)  # several chunks of 3 rows
    torch.manual_seed(0)
    x = torch.randn(3, 5, 1000) * 3
    tok = torch.randint(0, 1000, (3, 5))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    la, ea = token_log_probs(a, tok, temperature)
    lb, eb = chunked.chunked_token_log_probs(b, tok, temperature)
    w1, w2 = torch.randn(3, 5), torch.randn(3, 5)
    ((la * w1).sum() + (ea * w2).sum()).backward()
    ((lb * w1).sum() + (eb * w2).sum()).backward()
    torch.testing.assert_close(lb, la, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eb, ea, atol=1e-4, rtol=1e-5)
    assert a.grad is not None and b.grad is not None
    torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-5)


def test_logits_to_keep_matches_full_forward() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.trainer.logprobs import forward_logits

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, vocab_size=97)  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()

    class Batch:  # the fields forward_logits reads
        input_ids = torch.randint(0, 97, (2, 9))
        attention_mask = torch.tensor([[1] * 9, [1] * 7 + [0] * 2])
        logit_index = torch.tensor([[4, 5, 6, 7], [3, 4, 5, -1]])
        multimodal = None
        size = 2

    with torch.no_grad():
        got = forward_logits(model, Batch())  # type: ignore[arg-type]
        full = model(input_ids=Batch.input_ids, attention_mask=Batch.attention_mask).logits
    want = full[torch.arange(2)[:, None], Batch.logit_index.clamp(min=0)]
    valid = Batch.logit_index >= 0  # padding positions are masked out by the caller
    torch.testing.assert_close(got[valid], want[valid], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_compiled_chunks_match_eager(temperature: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """`compiled=True` (inductor-fused chunks, `trainer.compile`) gives the eager values and
    gradients, in one call and split over several (uneven) chunks."""
    torch.manual_seed(0)
    x = torch.randn(7, 1000) * 3
    tok = torch.randint(0, 1000, (7,))
    w1, w2 = torch.randn(7), torch.randn(7)
    eager = x.clone().requires_grad_()
    le, ee = chunked.chunked_token_log_probs(eager, tok, temperature)
    ((le * w1).sum() + (ee * w2).sum()).backward()
    for elements in (1 << 28, 3000):  # one chunk; chunks of 3, 3, 1 rows
        monkeypatch.setattr(chunked, "COMPILED_CHUNK_ELEMENTS", elements)
        comp = x.clone().requires_grad_()
        lc, ec = chunked.chunked_token_log_probs(comp, tok, temperature, compiled=True)
        ((lc * w1).sum() + (ec * w2).sum()).backward()
        torch.testing.assert_close(lc, le, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ec, ee, atol=1e-4, rtol=1e-5)
        assert comp.grad is not None and eager.grad is not None
        torch.testing.assert_close(comp.grad, eager.grad, atol=1e-5, rtol=1e-5)
