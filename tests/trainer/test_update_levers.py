"""The Actor's opt-in update levers (`UpdateLevers`) change how the update runs, not what.

Real tiny Qwen2 models on CPU (float32), the multi-turn synthetic batch of the other trainer
tests, packing on: every lever, alone and combined, eager and compiled, must move the weights
as today's path does; compiled with the traced attention, a decoder layer (or the whole
decoder) is one graph, and a batch of other lengths compiles nothing new.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_synth import batch, configs

from agentrl.backends import TorchBackend
from agentrl.trainer.actor import Actor
from agentrl.trainer.levers import UpdateLevers

SIZES = [3, 2, 3]


def _model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)


def _update(
    path: Path, levers: UpdateLevers, compiled: bool = False, update_path: str = "materialized"
) -> tuple[Actor, dict[str, float]]:
    cfgs = configs(mini_batch_size=8, micro_batch_size=4, packing=True, compile=compiled,
                   update_path=update_path)  # fmt: skip
    actor = Actor(_model(path), TorchBackend("cpu"), *cfgs, levers=levers)
    metrics = actor.update(batch(SIZES, seed=1), torch.Generator().manual_seed(0))
    return actor, metrics


def _same_update(a: tuple[Actor, dict[str, float]], b: tuple[Actor, dict[str, float]]) -> None:
    (actor_a, m_a), (actor_b, m_b) = a, b
    assert m_a["grad_norm"] > 0
    for key in ("loss", "entropy", "grad_norm", "clip_frac"):
        assert abs(m_a[key] - m_b[key]) < 1e-5, key
    weights = dict(actor_a.model.named_parameters())
    for name, p in actor_b.model.named_parameters():
        torch.testing.assert_close(p, weights[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "levers, update_path",
    [
        (UpdateLevers(traced_attention=True), "materialized"),
        (UpdateLevers(host_pack=True), "materialized"),
        (UpdateLevers(traced_attention=True, host_pack=True), "fused"),
    ],
)
def test_eager_levers_update_like_default(
    tiny_model_dir: Path, levers: UpdateLevers, update_path: str
) -> None:
    reference = _update(tiny_model_dir, UpdateLevers(), update_path=update_path)
    _same_update(reference, _update(tiny_model_dir, levers, update_path=update_path))


@pytest.mark.parametrize("scope", ["layers", "decoder"])
def test_traced_attention_compiles_to_one_graph(tiny_model_dir: Path, scope: str) -> None:
    """`trainer.compile` with the traced attention: no graph break, one compiled frame for
    every layer (or for the decoder), the eager default's update, and a batch of other
    lengths runs on the same graphs."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # other tests' compiled layers must not hide a break here
    counters.clear()
    levers = UpdateLevers(traced_attention=True, host_pack=True, compile_scope=scope)  # type: ignore[arg-type]
    compiled = _update(tiny_model_dir, levers, compiled=True)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["frames"]["total"] == 1, dict(counters["frames"])
    _same_update(_update(tiny_model_dir, UpdateLevers()), compiled)
    counters.clear()
    actor = compiled[0]
    for seed in (5, 6):  # other lengths, longest segment and row count
        actor.update(batch([2, 4, 1], seed=seed), torch.Generator().manual_seed(0))
    assert not counters["recompiles"] and not counters["frames"], dict(counters["frames"])


def test_levers_need_packing(tiny_model_dir: Path) -> None:
    for levers in (UpdateLevers(traced_attention=True), UpdateLevers(host_pack=True)):
        with pytest.raises(ValueError, match="needs trainer.packing"):
            Actor(_model(tiny_model_dir), TorchBackend("cpu"), *configs(), levers=levers)
