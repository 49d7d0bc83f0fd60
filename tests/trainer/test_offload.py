"""CPU offload: FSDP2's CPUOffloadPolicy and offload between phases leave the update unchanged.

On CPU the offload moves are trivially local, so these tests prove the code paths run and do
not change the math (FSDP2 with `CPUOffloadPolicy` on two gloo ranks equals one process). The
GPU test, skipped without CUDA, also checks that the actor's memory leaves the GPU between
phases and comes back for the update.
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


def _actor(model_dir: str, backend: object, dtype: torch.dtype = torch.float32) -> Actor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    return Actor(model, backend, *configs(**SETTINGS))  # type: ignore[arg-type]


def _train(actor: Actor) -> dict[str, float]:
    b = batch(SIZES)
    b.old_log_probs = actor.compute_log_probs(b)
    return actor.update(b, torch.Generator().manual_seed(0))


def _rank(rank: int, store: str, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    from agentrl.backends.fsdp2 import FSDP2Backend

    backend = FSDP2Backend("cpu", offload_policy=True)
    actor = _actor(model_dir, backend)
    metrics = _train(actor)
    params = dict(backend.full_state_dict(actor.model))
    torch.save({"metrics": metrics, "params": params}, Path(out) / f"rank{rank}.pt")
    backend.close()


def test_fsdp2_offload_policy_matches_single_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tiny_model_dir), str(tmp_path)), nprocs=2)
    single = _actor(str(tiny_model_dir), TorchBackend("cpu"))
    metrics = _train(single)
    assert metrics["grad_norm"] > 0
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        assert abs(got["metrics"]["loss"] - metrics["loss"]) < 1e-5
        for name, p in single.model.state_dict().items():
            torch.testing.assert_close(got["params"][name], p, atol=2e-5, rtol=1e-4, msg=name)


def _phase_offload_case(model_dir: Path, device: str) -> None:
    plain = _actor(str(model_dir), TorchBackend(device))
    offloaded = _actor(str(model_dir), TorchBackend(device, True, True))
    for actor in (plain, offloaded):
        _train(actor)
        _train(actor)  # a second step reloads the offloaded Adam moments
    if device == "cuda":
        assert all(p.device.type == "cpu" for p in offloaded.model.parameters())
        state = next(iter(offloaded.optimizer.state.values()))
        assert state["exp_avg"].device.type == "cpu"
    want = plain.model.state_dict()
    for name, p in offloaded.model.state_dict().items():
        torch.testing.assert_close(p.to(want[name].device), want[name], msg=name)


def test_phase_offload_matches_plain(tiny_model_dir: Path) -> None:
    _phase_offload_case(tiny_model_dir, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_phase_offload_frees_gpu_memory(tiny_model_dir: Path) -> None:
    _phase_offload_case(tiny_model_dir, "cuda")
