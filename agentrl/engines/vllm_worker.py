"""A vLLM worker extension that loads agentrl's weight updates (imported inside vLLM workers).

vLLM mixes the class named by `worker_extension_cls` into its worker (GPU or CPU), so
`self.model_runner` is the worker's model runner and `collective_rpc("<method>", args=...)`
calls these methods on every worker. Arguments cross a process boundary (msgpack; tensors
would arrive as nested lists), so weights come as a safetensors file's path.

Loading goes through `model_runner.reload_weights(weights_iterator=...)`, not
`model.load_weights`: vLLM post-processes weights after loading (on CPU it repacks linear
weights for its kernels), and `reload_weights` redoes that step; the model's own loader maps
HF parameter names onto vLLM's fused layout and skips `lm_head` for tied embeddings.

Importing this module (vLLM does, in each worker's process, before the model loads) also
registers agentrl's backend for vLLM's native weight-transfer API (`vllm_transfer`), so
`weight_transfer_config={"backend": "agentrl_file"}` works in that process; the method
below is the fallback for a vLLM without that API.

Start a server that accepts file-based updates with `agentrl.engines.vllm_server`
(`python -m vllm.entrypoints.openai.api_server ... --worker-extension-cls
agentrl.engines.vllm_worker.WeightSyncExtension`, `VLLM_SERVER_DEV_MODE=1`).
"""

from __future__ import annotations

from typing import Any


def _register_transfer_backend() -> None:
    """`vllm_transfer.register()` where this vLLM has the weight-transfer API."""
    try:
        from agentrl.engines import vllm_transfer
    except ImportError:  # an older vLLM: no `vllm.distributed.weight_transfer`
        return
    vllm_transfer.register()


_register_transfer_backend()


class WeightSyncExtension:
    """Methods reachable through `collective_rpc`; no vLLM import at module level."""

    model_runner: Any  # provided by the vLLM worker this class is mixed into

    def agentrl_load_weights_file(self, path: str) -> int:
        """Load a safetensors file written by `update_weights`; how many tensors."""
        from safetensors.torch import load_file

        return self._agentrl_reload(load_file(path, device="cpu"))

    def _agentrl_reload(self, tensors: dict[str, Any]) -> int:
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()))
        return len(tensors)
