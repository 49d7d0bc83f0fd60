"""torch.compile (inductor) of the static decode forward, kept capturable by `_cudagraph`.

Why: inside a CUDA graph a small model's decode step is still bound by kernel count, not by
bandwidth: about 40 tiny kernels a layer (transformers' float32 RMSNorm, rotary
cat/neg/mul/add, cache writes, key/value gathers, masked attention, SiLU*mul, residual adds).
Inductor fuses each elementwise chain into one kernel; the matmuls stay library calls.

What is compiled is only the model forward (`StaticDecoder._logits`): sampling stays eager,
so the sampling mode costs no recompile. The batch and the attended key length are marked
dynamic, so one graph serves every batch >= 2 and every key-length bucket; batch 1 gets its
own (dynamo always specialises a size of 1): two compiles in all, however many buckets
(each ~40-100 s for a 24-layer model on an H200, cold). The compiled code has no host syncs
and writes the cache in place (the write indexes the whole cache tensor; through a per-layer
view inductor would copy the layer every step), so `_cudagraph` captures it as it is.

Measured on an H200 (Qwen2.5-0.5B shape, bf16, one step in a CUDA graph): batch 1 1.4-2.1 ms
(key length 128-4096) vs 2.9-4.3 ms eager; batch 8 1.9 vs 3.8 ms; 400 kernels vs 1158.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def compile_logits(fn: LogitsFn) -> LogitsFn:
    """`fn(inp [rows, B], cols [L]) -> logits [B, V]` compiled with dims B and L dynamic.

    `fullgraph=True`: a graph break would silently split the step into eager pieces and lose
    most of the gain, so it fails loudly instead."""
    compiled = torch.compile(fn, fullgraph=True)

    def run(inp: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        # maybe_: no error when a dim is 1 (then specialised) or already known.
        torch._dynamo.maybe_mark_dynamic(inp, 1)
        torch._dynamo.maybe_mark_dynamic(cols, 0)
        return compiled(inp, cols)

    return run


PrefillFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def compile_prefill_logits(fn: PrefillFn) -> PrefillFn:
    """`fn(inp [4, n, width], rows [2, n], cols [L]) -> logits [n, V]` (the static decoder's
    eager-shaped prefill forward) compiled with n, width and L dynamic.

    Why: eager prefill is bound by the host, not the GPU: ~60 small ops a layer, so on an
    H200 a call took 20-40 ms whatever its size
    (`benchmarks/diagnostics/gpu_prefill_attention.py`), and a pipelined multi-turn rollout
    spent most of its engine time there. Inductor fuses the
    elementwise chains; the caller pads every call to at least 2 rows x 2 columns, and
    duck sizing is off (two sizes that happen to be equal must not become one symbol), so one
    graph serves every call: no recompile as shapes change. Prefill stays outside CUDA graphs
    (its shapes change on every call)."""
    import torch.fx.experimental._config as fx_config

    compiled = torch.compile(fn, fullgraph=True)

    def run(inp: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        for t, dims in ((inp, (1, 2)), (rows, (1,)), (cols, (0,))):
            for d in dims:
                torch._dynamo.maybe_mark_dynamic(t, d)
        with cast(Any, fx_config).patch(use_duck_shape=False):  # added at import: untyped
            return compiled(inp, rows, cols)

    return run
