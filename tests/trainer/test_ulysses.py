"""Ulysses sequence parallelism on two gloo ranks (CPU) equals one process, packed.

Both ranks form one sequence-parallel group: they train on the same rows, each holding half
of every packed micro-batch, exchanging heads around attention by all-to-all. Log-probs,
the loss and the updated weights must equal a single process's packed update on the batch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from trainer_synth import batch, configs

from agentrl.backends import TorchBackend
from agentrl.trainer.actor import Actor

SIZES = [2, 2, 3]
SETTINGS = {"mini_batch_size": 5, "micro_batch_size": 2, "packing": True}


def _actor(model_dir: str, backend: object, **extra: object) -> Actor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return Actor(model, backend, *configs(**{**SETTINGS, **extra}))  # type: ignore[arg-type]


def _train(actor: Actor) -> tuple[dict[str, float], torch.Tensor]:
    b = batch(SIZES)
    b.old_log_probs = actor.compute_log_probs(b)
    return actor.update(b, torch.Generator().manual_seed(0)), b.old_log_probs


def _rank(rank: int, world: int, store: str, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    from agentrl.backends.fsdp2 import FSDP2Backend

    backend = FSDP2Backend("cpu", sequence_parallel=2)
    # The two ranks of a Ulysses group train the same rows; data-parallel groups split them.
    assert backend.shard(5) == list(range(rank // 2, 5, world // 2))
    actor = _actor(model_dir, backend, ulysses_sp=2)
    metrics, old = _train(actor)
    params = dict(backend.full_state_dict(actor.model))
    torch.save({"metrics": metrics, "old": old, "params": params}, Path(out) / f"rank{rank}.pt")
    backend.close()


# Four processes on CI's two cores (~27 s there): the data-parallel x Ulysses layout runs in
# CI's slow stage; the two-process one by default.
@pytest.fixture(
    scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=["sp2", "dp2xsp2"]
)
def ranks(
    request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[dict]:
    world = request.param
    out = tmp_path_factory.mktemp(f"ulysses{world}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = (world, str(out / "store"), str(tiny_model_dir), str(out))
    mp.spawn(_rank, args=args, nprocs=world)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


def test_ulysses_matches_single_process(ranks: list[dict], tiny_model_dir: Path) -> None:
    actor = _actor(str(tiny_model_dir), TorchBackend("cpu"))
    metrics, old = _train(actor)
    params = dict(TorchBackend("cpu").full_state_dict(actor.model))
    assert metrics["grad_norm"] > 0
    for r in ranks:
        torch.testing.assert_close(r["old"], old, atol=2e-6, rtol=0)
        assert abs(r["metrics"]["loss"] - metrics["loss"]) < 1e-5
        assert abs(r["metrics"]["grad_norm"] - metrics["grad_norm"]) < 1e-4
        for name, p in params.items():
            torch.testing.assert_close(r["params"][name], p, atol=2e-5, rtol=1e-4, msg=name)


def test_ulysses_needs_packing_and_fsdp2(tiny_model_dir: Path) -> None:
    from agentrl.backends import build_backend
    from agentrl.config import TrainerConfig

    with pytest.raises(ValueError, match="fsdp2"):
        build_backend("torch", "cpu", TrainerConfig(ulysses_sp=2, packing=True))
    with pytest.raises(ValueError, match="packing"):
        _actor(str(tiny_model_dir), TorchBackend("cpu"), ulysses_sp=2, packing=False)
