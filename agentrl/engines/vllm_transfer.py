"""agentrl's backend for vLLM's native weight-transfer API (imported inside vLLM processes).

vLLM 0.26.0 and 0.32 take new weights in four phases, the same calls in-process (`AsyncLLM`)
and on a server (0.32: `vllm/entrypoints/rl/online/api_router.py`; 0.26.0:
`vllm/entrypoints/serve/dev/rlhf/api_router.py`): `init_weight_transfer_engine` once, then
per update `start_weight_update`, `update_weights` (one or more chunks) and
`finish_weight_update` (0.32 takes the new weights' label there; 0.26.0 takes none). The
bytes travel by a *backend* chosen with the engine argument
`weight_transfer_config={"backend": ...}`. vLLM's own backends (NCCL, sparse NCCL, CUDA IPC,
sharded RDT, NCCL M2N, ModelExpress: `vllm/distributed/weight_transfer/factory.py`) all
move GPU memory; none runs on a CPU build. vLLM's factory takes backends registered at run
time (`WeightTransferEngineFactory.register_engine`), so agentrl registers one,
`agentrl_file`: an update chunk names a safetensors file (written by the trainer into
/dev/shm or `weight_sync_dir`) that every worker loads. Its phases are those of vLLM's IPC
backend: `start` begins a layer-wise reload (vLLM re-runs each layer's post-processing, e.g.
the CPU kernels' weight repacking), each chunk goes through the model's own `load_weights`
(HF names onto vLLM's fused layout), `finish` completes it.

Registration must happen in the process that builds the worker, before it loads the model:
`vllm_worker` (the worker extension vLLM imports there) calls `register()` on import.

The two releases' base classes differ in what a backend must define: 0.26.0 also declares
the trainer side abstract (`trainer_send_weights`, a static method), which 0.32 moved to
a class of its own; the engine defines it (agentrl's trainer writes the file itself), so it
instantiates under both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from agentrl.engines.vllm_platform import TRANSFER_BACKEND as BACKEND


def register() -> None:
    """Add `agentrl_file` to vLLM's weight-transfer factory in this process (idempotent)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    try:
        WeightTransferEngineFactory.register_engine(BACKEND, FileWeightTransferEngine)
    except ValueError:  # already registered in this process
        pass


@dataclass
class FileInitInfo(WeightTransferInitInfo):
    """Nothing to set up: no process group, no connection."""


@dataclass
class FileUpdateInfo(WeightTransferUpdateInfo):
    """One chunk: a safetensors file of HF-named tensors that this machine's workers read."""

    path: str


class FileWeightTransferEngine(WeightTransferEngine[FileInitInfo, FileUpdateInfo]):
    """Weights from a safetensors file, loaded layer-wise (module docstring)."""

    init_info_cls = FileInitInfo
    update_info_cls = FileUpdateInfo
    supports_draft_weight_update = False

    def init_transfer_engine(self, init_info: FileInitInfo) -> None:
        return None

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronizes the accelerator, which raises on a CPU build (there the
        # copies into the model's parameters are synchronous); on a GPU the host-to-device
        # copies may still run when this returns, so it synchronizes as the base class does.
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            import torch

            torch.accelerator.synchronize()

    def receive_weights(self, update_info: FileUpdateInfo) -> None:
        from safetensors.torch import load_file

        self.model.load_weights(iter(load_file(update_info.path, device="cpu").items()))

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def shutdown(self) -> None:
        return None

    @staticmethod
    def trainer_send_weights(iterator: Iterator[Any], trainer_args: Any) -> None:
        """vLLM 0.26.0's trainer-side hook (module docstring); agentrl's engines write the
        safetensors file and name it in `update_weights` instead."""
        raise NotImplementedError(
            "agentrl_file has no trainer-side sender: agentrl's vLLM engines write the weights "
            "file and pass its path to update_weights"
        )
