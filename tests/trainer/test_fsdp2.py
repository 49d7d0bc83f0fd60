"""FSDP2 on two gloo ranks (CPU) trains exactly like one process on the same batch.

Both sides go through the real `Actor.update`: rows are sharded per rank, micro-batches are
weighted by their share of the global token count, gradients are averaged by FSDP and scaled
back by `grad_scale`. The batch (7 rows, mini 5, micro 2) leaves the ranks with different row
and micro-batch counts, which the Actor must pad so FSDP's collectives stay in step. The
second half checks a checkpoint round trip: full state on rank 0 → fresh sharded actor.
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
SETTINGS = {"mini_batch_size": 5, "micro_batch_size": 2}


def _actor(model_dir: str, backend: object) -> Actor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return Actor(model, backend, *configs(**SETTINGS))  # type: ignore[arg-type]


def _train(actor: Actor) -> tuple[dict[str, float], torch.Tensor]:
    b = batch(SIZES)
    b.old_log_probs = actor.compute_log_probs(b)
    return actor.update(b, torch.Generator().manual_seed(0)), b.old_log_probs


def _rank(rank: int, store: str, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    from agentrl.backends.fsdp2 import FSDP2Backend

    backend = FSDP2Backend("cpu")
    actor = _actor(model_dir, backend)
    metrics, old = _train(actor)
    result = {"metrics": metrics, "old": old, "params": dict(backend.full_state_dict(actor.model))}
    state = actor.state()
    ckpt = Path(out) / "state.pt"
    if rank == 0:
        torch.save(state, ckpt)
    backend.barrier()
    resumed = _actor(model_dir, backend)
    resumed.load_state(torch.load(ckpt, weights_only=False))
    # One more identical update on both: equal only if Adam moments and the step came back.
    result["continued"] = dict(backend.full_state_dict(_continue(actor)))
    result["resumed"] = dict(backend.full_state_dict(_continue(resumed)))
    result["gathered"] = backend.gather_objects(rank)
    torch.save(result, Path(out) / f"rank{rank}.pt")
    backend.close()


def _continue(actor: Actor) -> torch.nn.Module:
    _train(actor)
    return actor.model


@pytest.fixture(scope="module")
def ranks(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp2")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank, args=(str(out / "store"), str(tiny_model_dir), str(out)), nprocs=2)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def single(tiny_model_dir: Path) -> tuple[dict[str, float], torch.Tensor, dict]:
    actor = _actor(str(tiny_model_dir), TorchBackend("cpu"))
    metrics, old = _train(actor)
    return metrics, old, dict(TorchBackend("cpu").full_state_dict(actor.model))


def test_loss_and_parameters_match_single_process(ranks: list[dict], single: tuple) -> None:
    metrics, old, params = single
    assert metrics["grad_norm"] > 0
    for r in ranks:
        torch.testing.assert_close(r["old"], old, atol=1e-6, rtol=0)
        assert abs(r["metrics"]["loss"] - metrics["loss"]) < 1e-5
        assert abs(r["metrics"]["grad_norm"] - metrics["grad_norm"]) < 1e-4
        assert r["params"].keys() == params.keys()
        for name, p in params.items():
            torch.testing.assert_close(r["params"][name], p, atol=2e-5, rtol=1e-4, msg=name)


def test_parameters_moved(single: tuple, tiny_model_dir: Path) -> None:
    """Guard against a vacuous pass: the update really changed the weights."""
    _, _, params = single
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).state_dict()
    moved = max(float((params[k] - start[k]).abs().max()) for k in params)
    assert moved > 1e-4


def test_every_rank_gets_full_weights(ranks: list[dict]) -> None:
    """Weight sync feeds every rank's engine, so rank 1 needs the full tensors too."""
    for name, p in ranks[0]["params"].items():
        assert torch.equal(ranks[1]["params"][name], p), name
    assert ranks[0]["gathered"] == ranks[1]["gathered"] == [0, 1]


def test_checkpoint_round_trip_continues_identically(ranks: list[dict]) -> None:
    for r in ranks:
        for name, p in r["continued"].items():
            torch.testing.assert_close(r["resumed"][name], p, atol=1e-6, rtol=0, msg=name)
