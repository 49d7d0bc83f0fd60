"""Prefill and its sampling as CUDA-graph replays over bucketed shapes (`prefill_graphs`).

Why: a prefill call launches hundreds of kernels (even compiled: ~15 a layer plus the matmul
library calls), and each launch is a torch or Triton call that releases the interpreter lock
and takes it back. In a pipelined run (`trainer.async`, thread producer) the trainer's thread
and the rollout's event loop want the lock too, so every retake can wait: on an H200 a
compiled prefill call took 11-16 ms in the synchronous loop and 29-38 ms pipelined (session
9's sweep, BENCHMARKS.md), most of the pipelined engine's time. A graph replay is one call.

Shapes are fixed per graph, so a call is padded up to a bucket: rows to a power of two (at
least 2), new-token width to a power of two (at least 16), attended key length to the decode
graphs' length buckets. Padding rows and columns write into the scratch slot
(`StaticDecoder.prefill_inputs` lays them out), and padded key columns are masked, so padding
changes no live sequence and no logit. A call whose padded size would pass `max_tokens`
(rows x width) or `max_mask` (rows x width x key length) runs the forward as before (eager or
compiled): big prefills are bound by the GPU, where padding costs and a replay saves little.

Sampling the admitted rows' first tokens is a second graph per (row bucket, sampling mode),
reading the logits from one static buffer. A graph is captured the first time its key is
needed (three forward runs, on the engine's thread); the engine's `stats` count captures,
prefill replays and the calls too big for a graph (`prefill_graph_*`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention import sdpa_kernel

from agentrl.engines._cudagraph import GraphPool, length_bucket
from agentrl.engines._fast_sampling import sample_rows
from agentrl.engines._static_model import PREFILL_BACKENDS, StaticDecoder

Row = tuple[int, int, Sequence[int]]  # (slot, start, new tokens), as `StaticDecoder.prefill`
MIN_ROWS, MIN_WIDTH = 2, 16


@dataclass
class _Entry:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # static inputs the graph reads
    out: torch.Tensor  # static output the graph writes


class PrefillGraphs:
    """`prefill(rows)` and `sample(logits, params, mode)` as replays where shapes fit."""

    def __init__(
        self,
        decoder: StaticDecoder,
        pool: GraphPool,
        row_buckets: Sequence[int],
        pad_params: Sequence[float],
        stats: dict[str, float],
        max_tokens: int = 8192,
        max_mask: int = 1 << 25,
    ) -> None:
        self.decoder, self.pool = decoder, pool
        self.row_buckets = sorted(row_buckets)  # sampling: the engine's batch buckets
        self.pad_params = np.asarray(pad_params, np.float64)  # a padding row's sampling inputs
        self.max_tokens, self.max_mask = max_tokens, max_mask
        self._prefill: dict[tuple[int, int, int], _Entry] = {}
        self._sample: dict[tuple[int, int], _Entry] = {}
        self._logits: torch.Tensor | None = None  # [largest row bucket, vocab] float32
        # The engine's counters: prefill_graph_{captures,replays,fallbacks}
        self.stats = stats

    def __len__(self) -> int:
        return len(self._prefill) + len(self._sample)

    # ------------------------------------------------------------------ prefill

    def key(self, rows: Sequence[Row]) -> tuple[int, int, int] | None:
        """The graph key (rows, width, key length) for this call, or None: too big, runs the
        forward."""
        n = len(rows)
        width = max(len(t) for _, _, t in rows)
        need = max(start + len(t) for _, start, t in rows)
        nb, wb = _pow2(n, MIN_ROWS), _pow2(width, MIN_WIDTH)
        lb = length_bucket(need, self.decoder.max_len)
        if nb * wb > self.max_tokens or nb * wb * lb > self.max_mask:
            return None
        return nb, wb, lb

    def prefill(self, rows: Sequence[Row]) -> torch.Tensor:
        """`StaticDecoder.prefill(rows)`: last-token logits [n, V], from a replay if the
        padded shape fits (a view of the graph's output: read it before this key's next
        replay), else from the forward."""
        key = self.key(rows)
        if key is None:
            self.stats["prefill_graph_fallbacks"] += 1
            return self.decoder.prefill(rows)
        entry = self._prefill.get(key) or self._capture_prefill(key)
        inp, per_row, _ = self.decoder.prefill_inputs(rows, shape=key[:2])
        entry.inputs[0].copy_(torch.from_numpy(inp))
        entry.inputs[1].copy_(torch.from_numpy(per_row))
        entry.graph.replay()
        self.stats["prefill_graph_replays"] += 1
        return entry.out[: len(rows)]

    def _capture_prefill(self, key: tuple[int, int, int]) -> _Entry:
        nb, wb, lb = key
        dec = self.decoder
        # Every row and column is padding: writes go to the scratch slot only.
        inp, per_row, _ = dec.prefill_inputs([(dec.scratch, 0, [0, 0])], shape=(nb, wb))
        inp_d = torch.from_numpy(inp).to(dec.device)
        rows_d = torch.from_numpy(per_row).to(dec.device)
        cols = dec.key_columns(lb)

        def forward() -> torch.Tensor:
            with sdpa_kernel(PREFILL_BACKENDS):
                return dec.prefill_logits(inp_d, rows_d, cols)

        graph, out = self.pool.capture(forward)
        self.stats["prefill_graph_captures"] += 1
        entry = _Entry(graph, (inp_d, rows_d), out)
        self._prefill[key] = entry
        return entry

    # ------------------------------------------------------------------ sampling

    def sample(self, logits: torch.Tensor, params: np.ndarray, mode: int) -> torch.Tensor:
        """`sample_rows(logits, params, mode)` as one replay: `logits` [n, V] on the device,
        `params` [6, n] float64 on the host. Returns [2, n] float64 on the host (token ids,
        their logprobs): the call's one device sync."""
        n = int(logits.shape[0])
        nb = next(b for b in self.row_buckets if b >= n)
        entry = self._sample.get((nb, mode)) or self._capture_sample(nb, mode, logits.shape[1])
        buf = self._buffer(logits.shape[1])
        buf[:n].copy_(logits)
        full = np.repeat(self.pad_params[:, None], nb, axis=1)
        full[:, :n] = params
        entry.inputs[0].copy_(torch.from_numpy(full))
        entry.graph.replay()
        return entry.out[:, :n].cpu()

    def _buffer(self, vocab: int) -> torch.Tensor:
        if self._logits is None:
            shape = (self.row_buckets[-1], vocab)
            self._logits = torch.zeros(shape, dtype=torch.float32, device=self.decoder.device)
        return self._logits

    def _capture_sample(self, nb: int, mode: int, vocab: int) -> _Entry:
        logits = self._buffer(vocab)[:nb]
        params = torch.from_numpy(np.repeat(self.pad_params[:, None], nb, axis=1))
        params = params.to(self.decoder.device)

        def draw() -> torch.Tensor:
            tokens, logps = sample_rows(logits, params, mode)
            return torch.stack([tokens.double(), logps.double()])

        graph, out = self.pool.capture(draw)
        self.stats["prefill_graph_captures"] += 1
        entry = _Entry(graph, (params,), out)
        self._sample[(nb, mode)] = entry
        return entry


def _pow2(n: int, least: int) -> int:
    out = least
    while out < n:
        out *= 2
    return out
