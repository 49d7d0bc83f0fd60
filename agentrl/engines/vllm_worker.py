"""A vLLM worker extension that loads agentrl's weight updates (imported inside vLLM workers).

NOT RUN HERE (no vLLM / GPU on the machines this was written on). vLLM mixes the class named
by `worker_extension_cls` into its GPU worker, so `self.model_runner` is the worker's model
runner and `collective_rpc("<method>", args=...)` calls these methods on every worker. The
model's own `load_weights` maps HF parameter names onto vLLM's fused/sharded layout.

Start a server that accepts file-based updates with:
    VLLM_SERVER_DEV_MODE=1 vllm serve <ckpt> --enable-sleep-mode \
        --worker-extension-cls agentrl.engines.vllm_worker.WeightSyncExtension
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class WeightSyncExtension:
    """Methods reachable through `collective_rpc`; no vLLM import at module level."""

    model_runner: Any  # provided by the vLLM worker this class is mixed into

    def agentrl_load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> int:
        """Load (HF name, tensor) pairs; returns how many were given."""
        items = list(named_tensors)
        self.model_runner.model.load_weights(weights=items)
        return len(items)

    def agentrl_load_weights_file(self, path: str) -> int:
        """Load a safetensors file written by `VLLMServerEngine.update_weights`."""
        from safetensors.torch import load_file

        return self.agentrl_load_weights(load_file(path, device="cpu").items())
