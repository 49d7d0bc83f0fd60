"""Prefill and its sampling as CUDA-graph replays over bucketed shapes (`prefill_graphs`).

Why: a prefill call launches hundreds of kernels (even compiled: ~15 a layer plus the matmul
library calls), and each launch is a torch or Triton call that releases the interpreter lock
and takes it back. In a pipelined run (`trainer.async`, thread producer) the trainer's thread
and the rollout's event loop want the lock too, so every retake can wait: on an H200 a
compiled prefill call took 11-16 ms in the synchronous loop and 29-38 ms pipelined (session
9's sweep, BENCHMARKS.md), most of the pipelined engine's time. A graph replay is one call.

Shapes are fixed per graph, so a call is padded up to a bucket: rows to a power of two (at
least 2 with `compile_prefill`, whose graph must not see a size of 1), new-token width to a
power of two (at least 16), attended key length to the decode graphs' length buckets.
Padding rows and columns write into the scratch slot (`StaticDecoder.prefill_inputs` lays
them out), and padded key columns are masked, so padding changes no live sequence and no
logit. The forward runs instead (eager or compiled) when the padded call would pass
`max_tokens` (rows x width) or `max_mask` (rows x width x key length), or when it is past
`BIG` tokens and padding would grow it more than `MAX_GROWTH` times over the forward's own
padded shape: big prefills are bound by the GPU, where padding costs and a replay saves
little.

Every prefill graph writes its logits into one static buffer, from which the sampling graph
(one per row bucket and sampling mode) reads, so the graphs' outputs cost one buffer,
however many keys are captured. A graph is captured the first time its key is needed (three
forward runs, on the engine's thread): captures are lazy, so unlike the decode graphs
(`precapture`) they happen while training runs, and a capture breaks if another thread
device-syncs or draws from the CUDA RNG meanwhile (e.g. a pipelined update with dropout on
the thread producer); a key whose capture failed runs the forward from then on. The
engine's `stats` count captures, replays, calls run by the forward and failed captures
(`prefill_graph_*`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn.attention import sdpa_kernel

from agentrl.engines._cudagraph import Captured, GraphPool, length_bucket, pow2_at_least
from agentrl.engines._fast_sampling import sample_packed
from agentrl.engines._static_model import PREFILL_BACKENDS, StaticDecoder

Row = tuple[int, int, Sequence[int]]  # (slot, start, new tokens), as `StaticDecoder.prefill`
MIN_WIDTH = 16
BIG, MAX_GROWTH = 2048, 1.5  # padded tokens; padded over the forward's own padded shape


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
        self._prefill: dict[tuple[int, int, int], Captured] = {}
        self._sample: dict[tuple[int, int], Captured] = {}
        self._broken: set[tuple[int, int, int]] = set()  # keys whose capture failed
        self.min_rows = 2 if decoder.pads_prefill else 1
        # Every graph's logits [rows, vocab] float32: rows for the largest prefill bucket of
        # an admission (the largest batch bucket, rounded up) and sampling bucket.
        self.max_rows = pow2_at_least(self.row_buckets[-1], self.min_rows)
        vocab = int(decoder.lm_head.weight.shape[0])
        shape = (self.max_rows, vocab)
        self._logits = torch.zeros(shape, dtype=torch.float32, device=decoder.device)
        # The engine's counters: prefill_graph_{captures,replays,fallbacks,failed_captures}
        self.stats = stats

    # ------------------------------------------------------------------ prefill

    def key(self, rows: Sequence[Row]) -> tuple[int, int, int] | None:
        """The graph key (rows, width, key length) for this call, or None: too big, runs the
        forward."""
        n = len(rows)
        width = max(len(t) for _, _, t in rows)
        need = max(start + len(t) for _, start, t in rows)
        nb, wb = pow2_at_least(n, self.min_rows), pow2_at_least(width, MIN_WIDTH)
        lb = length_bucket(need, self.decoder.max_len)
        padded = nb * wb
        if padded > self.max_tokens or padded * lb > self.max_mask or nb > self.max_rows:
            return None
        if padded > BIG and padded > MAX_GROWTH * n * width:
            return None
        return nb, wb, lb

    def prefill(self, rows: Sequence[Row]) -> torch.Tensor:
        """`StaticDecoder.prefill(rows)`: last-token logits [n, V], from a replay if the
        padded shape fits (a view of the shared logits buffer: read it before the next
        prefill or sampling call), else from the forward."""
        key = self.key(rows)
        entry = self._prefill.get(key) if key is not None else None
        if key is not None and entry is None and key not in self._broken:
            try:
                entry = self._capture_prefill(key)
            except Exception:  # noqa: BLE001 - this key runs the forward from now on
                self._broken.add(key)
                self.stats["prefill_graph_failed_captures"] += 1
        if key is None or entry is None:
            self.stats["prefill_graph_fallbacks"] += 1
            return self.decoder.prefill(rows)
        inp, per_row, _ = self.decoder.prefill_inputs(rows, shape=key[:2])
        entry.inputs[0].copy_(torch.from_numpy(inp))
        entry.inputs[1].copy_(torch.from_numpy(per_row))
        entry.graph.replay()
        self.stats["prefill_graph_replays"] += 1
        return entry.out[: len(rows)]

    def _capture_prefill(self, key: tuple[int, int, int]) -> Captured:
        nb, wb, lb = key
        dec = self.decoder
        # Every row and column is padding: writes go to the scratch slot only.
        inp, per_row, _ = dec.prefill_inputs([(dec.scratch, 0, [0, 0])], shape=(nb, wb))
        inp_d = torch.from_numpy(inp).to(dec.device)
        rows_d = torch.from_numpy(per_row).to(dec.device)
        cols = dec.key_columns(lb)
        out = self._logits[:nb]

        def forward() -> torch.Tensor:
            with sdpa_kernel(PREFILL_BACKENDS):
                out.copy_(dec.prefill_logits(inp_d, rows_d, cols))
            return out

        graph, out = self.pool.capture(forward)
        self.stats["prefill_graph_captures"] += 1
        entry = Captured(graph, (inp_d, rows_d), out)
        self._prefill[key] = entry
        return entry

    # ------------------------------------------------------------------ sampling

    def sample(self, logits: torch.Tensor, params: np.ndarray, mode: int) -> torch.Tensor:
        """`sample_rows(logits, params, mode)` as one replay: `logits` [n, V] on the device,
        `params` [6, n] float64 on the host. Returns [2, n] float64 on the host (token ids,
        their logprobs)."""
        n = int(logits.shape[0])
        nb = next(b for b in self.row_buckets if b >= n)
        entry = self._sample.get((nb, mode)) or self._capture_sample(nb, mode)
        if logits.data_ptr() != self._logits.data_ptr():  # else a prefill graph wrote them
            self._logits[:n].copy_(logits)
        full = self._padded_params(nb)
        full[:, :n] = params
        entry.inputs[0].copy_(torch.from_numpy(full))
        entry.graph.replay()
        return entry.out[:, :n].cpu()

    def _padded_params(self, nb: int) -> np.ndarray:
        """Sampling inputs [6, nb] of padding rows (greedy, safe to run)."""
        return np.repeat(self.pad_params[:, None], nb, axis=1)

    def _capture_sample(self, nb: int, mode: int) -> Captured:
        logits = self._logits[:nb]
        params = torch.from_numpy(self._padded_params(nb)).to(self.decoder.device)
        graph, out = self.pool.capture(lambda: sample_packed(logits, params, mode))
        self.stats["prefill_graph_captures"] += 1
        entry = Captured(graph, (params,), out)
        self._sample[(nb, mode)] = entry
        return entry
