"""CUDA-graph capture and replay of the static decode step, one graph per shape bucket.

Why: a decode step of a small model is a few hundred tiny kernels; launched one by one from
Python the GPU idles between them (plain `generate` at batch 1 is launch-bound). Replaying a
captured graph launches them all at once. Shapes must be fixed per graph, so the engine pads
the batch to a bucket size and rounds the attended key length up to a bucket; a graph is
captured lazily the first time its (batch, key length, sampling mode) is needed.

All graphs share one memory pool (`GraphPool`, also holding the prefill graphs of
`_prefill_graphs`): they only ever run one at a time on one stream, and each graph's output
buffer stays referenced, so their intermediates may safely overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

StepFn = Callable[[torch.Tensor, int, int], torch.Tensor]
Key = tuple[int, int, int]  # (batch bucket, key-length bucket, sampling mode)


@dataclass
class Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # static inputs the graph reads
    out: torch.Tensor  # static output the graph writes


class GraphPool:
    """One memory pool for every graph an engine captures (decode steps, prefill, prefill
    sampling), and the one capture discipline they all follow."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool: _POOL_HANDLE | None = None

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Capture `fn()` (which reads static inputs the caller holds) into this pool;
        returns the graph and its static output."""
        # Warm up on a side stream first (allocator, kernel selection, lazy inits), as
        # torch.cuda.graphs recommends, then capture on the same side-stream discipline.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the event loop thread may touch CUDA (e.g. tensor creation) while a
        # worker thread captures; only this thread's calls must be capture-safe. Two things
        # stay refused on every thread while a capture runs: a device-wide sync
        # (`torch.cuda.synchronize()`; a stream's own sync is fine) and a draw from the CUDA
        # RNG. They break the capture, which is why `precapture` captures every decode graph a
        # run needs before its training steps begin.
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            out = fn()
        if self._pool is None:
            self._pool = graph.pool()
        return graph, out


class DecodeGraphs:
    """Captures `fn(inp, length, mode) -> out` per key; `run` copies inputs in and replays.

    `fn` may update `inp` in place (the decode step advances it to the next step's input)."""

    def __init__(
        self, fn: StepFn, pad_column: torch.Tensor, device: torch.device, pool: GraphPool
    ) -> None:
        self._fn = fn
        self._pad = pad_column.to(device)  # [rows] a padding row's inputs, safe to run
        self._device = device
        self._graphs: dict[Key, Captured] = {}
        self._pool = pool

    def __len__(self) -> int:
        return len(self._graphs)

    def run(self, inp: torch.Tensor, length: int, mode: int, steps: int = 1) -> torch.Tensor:
        """Replay the graph for `inp`'s shape (capturing it first if new) `steps` times in a
        row; `fn` advances its input in place, so each replay is the next decode step. Returns
        every step's output, `[steps, *out.shape]`, copied to the host in one transfer (the
        chunk's one device sync): host work and the sync are paid once per chunk."""
        entry = self.ensure((int(inp.shape[1]), length, mode))
        entry.inputs[0].copy_(inp)
        hist = torch.empty((steps, *entry.out.shape), dtype=entry.out.dtype, device=self._device)
        for s in range(steps):
            entry.graph.replay()
            hist[s].copy_(entry.out)
        return hist.cpu()

    def ensure(self, key: Key) -> Captured:
        """The graph for `key`, captured now if it is new."""
        entry = self._graphs.get(key)
        return entry if entry is not None else self._capture(key)

    def _capture(self, key: Key) -> Captured:
        batch, length, mode = key
        inp = self._pad[:, None].repeat(1, batch).contiguous()
        graph, out = self._pool.capture(lambda: self._fn(inp, length, mode))
        entry = Captured(graph, (inp,), out)
        self._graphs[key] = entry
        return entry


def length_buckets(max_len: int) -> list[int]:
    """Every key-length bucket `length_bucket` can return up to `max_len`."""
    out, n = [], 128
    while n < max_len:
        out.append(n)
        n *= 2
    return [*out, max_len]


def length_bucket(need: int, max_len: int) -> int:
    """Key columns a graph attends over: the next power of two >= need (min 128), capped."""
    return min(pow2_at_least(need, 128), max_len)


def pow2_at_least(n: int, least: int) -> int:
    """`least` doubled until it is >= n (a graph bucket; `least` a power of two)."""
    out = least
    while out < n:
        out *= 2
    return out
