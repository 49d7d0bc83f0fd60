"""The in-process engines' own CUDA stream: why a decode step does not queue behind an update.

Why: with `trainer.async` (thread producer) the engine decodes on its worker thread while the
trainer's forward/backward runs on the main thread of the same process. On one CUDA stream
the GPU runs their kernels strictly in submission order, so a decode step submitted behind a
100 ms backward waits for all of it, and the pipeline overlaps only host work. On a stream of
its own at the highest priority, the engine's small, latency-bound decode kernels are
scheduled ahead of the update's pending thread blocks, and the update fills the SMs decoding
leaves idle (measured in `benchmarks/gpu_grpo.py --max-staleness`, BENCHMARKS.md).

Ordering rules: everything that touches the engine's device state runs inside `scope()` (the
worker's steps, graph capture, sleep/wake, building the KV cache). Work the constructing
thread queued before the engine existed (the weights' copy onto the device) is waited for
once, at construction. `exchange()` is for copies from a caller's tensors (`update_weights`):
the engine's stream first waits for the caller's (the new values are ready), and afterwards
the caller's stream waits for the engine's (the caller may free or overwrite its tensors
next). Everything else crosses through the host (token ids as Python lists), which syncs.

Off CUDA, or with `own_stream=False` (an engine lever), both are no-ops: the caller thread's
current stream is used, as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# Lower is more urgent; torch maps an out-of-range value to the highest priority available.
HIGHEST_PRIORITY = -100


class EngineStream:
    """The stream an engine's device work runs on (None: the caller thread's current one)."""

    def __init__(self, device: torch.device, own: bool = True) -> None:
        self.stream: torch.cuda.Stream | None = None
        if own and device.type == "cuda":
            self.stream = torch.cuda.Stream(device, priority=HIGHEST_PRIORITY)
            self.stream.wait_stream(torch.cuda.current_stream(device))

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Device work inside runs on the engine's stream."""
        if self.stream is None:
            yield
            return
        with torch.cuda.stream(self.stream):
            yield

    @contextlib.contextmanager
    def exchange(self) -> Iterator[None]:
        """`scope()` for work that reads the calling thread's tensors: ordered after what the
        caller queued before, and the caller's later work ordered after it."""
        if self.stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(caller)
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:
            caller.wait_stream(self.stream)
