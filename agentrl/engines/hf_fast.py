"""FastHFEngine: the hf engine's GPU fast path (static KV cache, own forward, CUDA graphs).

Why: `HFEngine` decodes through transformers' forward, which at small batch is bound by
kernel-launch latency, not by the GPU (on an H200, plain `generate` ran 16 tok/s at batch 1
for a 0.5B model whose weight-bandwidth limit is ~4,850). This layer over `_hf_core.HFCore`
keeps everything user-visible (the request queue, continuous batching, admission, stop
handling, timeouts, failure semantics, `update_weights`) and replaces the batch state:

- `_static_model.StaticDecoder`: one pre-allocated cache `[layers, slots, kv, len, dim]`;
  rows are slots + per-row positions, so joining/leaving the batch copies no KV at all;
- `_cudagraph.DecodeGraphs`: each decode step is one replay of a graph captured per
  (batch bucket, key-length bucket, sampling mode); prefill stays eager (ragged lengths);
- `_fast_sampling`: temperature/top-k/top-p sampling and logprobs inside the graph, seeded
  per request by a counter-based hash (seeded requests are reproducible within this engine,
  but do not reproduce `HFEngine`'s token streams);
- `_slots.SlotPool`: a finished session's slot is parked, and its next turn prefills only
  the new suffix in place;
- decode chunks: while nobody can join, one worker-thread hop runs up to `decode_chunk`
  steps back to back on device (each step feeds its sampled token to the next) and reads
  them back with one sync. At batch 1 the per-step host cost (thread hop, input building,
  sync, bookkeeping) is most of a step; a chunk pays it once. A row that stops inside a
  chunk keeps computing (discarded) to the chunk's end, and a request arriving mid-chunk
  waits for it: at most `decode_chunk - 1` steps. Seeded sampling is counter-based, so the
  tokens are the same whatever the chunk size.
- `_prefix_share` (`share_prefill`): requests of one admission with identical prompts (a
  GRPO group) are prefilled once and their K/V copied; admission charges such duplicates
  no prefill budget, so a group is not split across calls. `stats["prefill_tokens"]` counts
  tokens computed, `stats["prefill_tokens_shared"]` those copied instead.

On CPU (or with `cuda_graphs=False`) the same static forward runs eagerly. Architectures
`_static_model` does not support are refused here; which hf engine runs is decided by
`agentrl.engines.build` from the typed `engine.hf` options. The speed knobs come as one
`FastHFTuning` (`engine.hf.tuning`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.config.engine import FastHFTuning
from agentrl.engines._cudagraph import DecodeGraphs, GraphPool, length_buckets
from agentrl.engines._cudagraph import length_bucket as _length_bucket
from agentrl.engines._fast_sampling import SAMPLE, pick_mode, sample_rows, split_seed
from agentrl.engines._hf_core import HFCore
from agentrl.engines._hf_core import Request as _Request
from agentrl.engines._prefill_graphs import PrefillGraphs
from agentrl.engines._prefix_share import prefill_shared
from agentrl.engines._sampling import make_generator
from agentrl.engines._slots import SlotPool
from agentrl.engines._static_model import StaticDecoder, unsupported_reason
from agentrl.engines.base import EngineError, SamplingParams


@dataclass
class _Row:
    slot: int
    seed_lo: int
    seed_hi: int


class FastHFEngine(HFCore):
    """Continuous batching over a static KV cache with CUDA-graph decode steps."""

    # Its fused sampler has no per-request hooks.
    features: frozenset[str] = frozenset({"weight_versions", "admission"})

    def __init__(
        self,
        model: Any,
        tokenizer_or_eos_ids: Any,
        *,
        max_batch_size: int = 64,
        device: str | torch.device | None = None,
        max_sessions: int = 1024,
        request_timeout_s: float | None = None,
        keep_kv_on_update: bool = False,
        max_seq_len: int = 4096,
        tuning: FastHFTuning | None = None,
        own_stream: bool = True,
        prefill_graphs: bool = False,
    ) -> None:
        """`tuning`: the speed knobs (`engine.hf.tuning`, default `FastHFTuning()`).
        Code-level levers, kept for comparison (benchmarks set them): `own_stream` (see
        `HFCore`) and `prefill_graphs`: prefill and its first-token sampling as CUDA-graph
        replays, shapes padded to buckets (rows, new tokens, key length; big calls run the
        forward), captured lazily during training (docs/engines.md says what breaks a
        capture). Needs CUDA graphs. Off: measured no faster end to end on the multi-turn
        GRPO workload (BENCHMARKS.md, session 11)."""
        reason = unsupported_reason(model)
        if reason:
            raise EngineError(f"FastHFEngine: {reason}; use HFEngine")
        tuning = tuning if tuning is not None else FastHFTuning()
        super().__init__(
            model,
            tokenizer_or_eos_ids,
            max_batch_size=max_batch_size,
            device=device,
            max_sessions=max_sessions,
            request_timeout_s=request_timeout_s,
            keep_kv_on_update=keep_kv_on_update,
            tuning=tuning,
            own_stream=own_stream,
        )
        self.tuning: FastHFTuning = tuning
        on_gpu = self.device.type == "cuda"
        if tuning.cuda_graphs and not on_gpu:
            raise EngineError("cuda_graphs=True needs a CUDA device")
        self.cuda_graphs = on_gpu if tuning.cuda_graphs is None else tuning.cuda_graphs
        if prefill_graphs and not self.cuda_graphs:
            raise EngineError("prefill_graphs=True needs CUDA graphs (a CUDA device)")
        self.prefill_graphs = bool(prefill_graphs)  # prefill + its sampling as replays
        self.decode_chunk = int(tuning.decode_chunk)
        self.share_prefill = bool(tuning.share_prefill)
        self.compile_decode = bool(tuning.compile_decode)  # torch.compile the decode forward
        self.compile_prefill = bool(tuning.compile_prefill)  # ... and the prefill forward
        self.max_seq_len = min(max_seq_len, self.max_positions)
        self.max_positions = self.max_seq_len  # requests end with "length" at the cache end
        slots = tuning.session_slots
        parked = min(max_sessions, max_batch_size if slots is None else slots)
        self._pool = SlotPool(max_batch_size + parked, parked)
        self.batch_buckets = sorted({b for b in tuning.batch_buckets if b < max_batch_size})
        self.batch_buckets.append(max_batch_size)
        self._row: dict[_Request, _Row] = {}
        self._admitting: set[tuple[int, ...]] = set()  # prompts of the admission in progress
        self._decoder: StaticDecoder | None = None
        self._graphs: DecodeGraphs | None = None
        self._prefill_graphs: PrefillGraphs | None = None
        with self._dev.scope():  # the cache is the engine stream's memory (see _stream)
            self._ensure_decoder()  # allocate it now: out-of-memory shows up here

    # ---------------------------------------------------------------- public API

    # Weights are copied in place (graphs keep pointing at the same tensors); sessions are
    # parked slots, and sleep() frees the cache and graphs (they point at device memory).

    def _drop_all_sessions(self) -> None:
        self._pool.clear_sessions()

    def _drop_session(self, session_id: str) -> None:
        self._pool.drop_session(session_id)

    def _release_device_state(self) -> None:
        self._decoder, self._graphs, self._prefill_graphs = None, None, None

    def precapture(
        self,
        lengths: Sequence[int] | None = None,
        modes: Sequence[int] = (SAMPLE,),
        *,
        sampling: Sequence[SamplingParams] = (),
    ) -> int:
        """Capture every batch bucket's decode graph for these key lengths (rounded up to
        buckets; None: every bucket up to `max_seq_len`) and sampling modes now, so a timed or
        latency-sensitive run never pays for a capture (nor, with `compile_prefill`, for the
        prefill's compile). `sampling` given: the modes those request settings select (e.g.
        FILTER for top-p, GREEDY for a greedy eval) instead of `modes`. Returns the number of
        graphs held."""
        if lengths is None:
            lengths = length_buckets(self.max_seq_len)
        if sampling:
            modes = capture_modes(sampling)
        with self._lock, torch.inference_mode(), self._dev.scope():
            decoder = self._ensure_decoder()
            if self.compile_prefill:  # its one compile now, not in the first timed prefill
                decoder.prefill([(decoder.scratch, 0, [0, 0])] * 2)
            if self._graphs is None:
                return 0
            for length in {_length_bucket(n, self.max_seq_len) for n in lengths}:
                for bucket in self.batch_buckets:
                    for mode in modes:
                        self._graphs.ensure((bucket, length, mode))
            return len(self._graphs)

    @property
    def captured_graphs(self) -> int:
        return len(self._graphs) if self._graphs is not None else 0

    # ---------------------------------------------------------------- the step

    def _new_generator(self, seed: int | None) -> torch.Generator:
        return make_generator(torch.device("cpu"), seed)  # only its seed is used

    def _ensure_decoder(self) -> StaticDecoder:
        if self._decoder is None:
            decoder = StaticDecoder(
                self.model,
                self._pool.n_slots,
                self.max_seq_len,
                compile=self.compile_decode,
                compile_prefill=self.compile_prefill,
            )
            self._decoder = decoder
            if self.cuda_graphs:
                pool = GraphPool(self.device)
                pad = torch.tensor(self._pad_column(), dtype=torch.float64)
                self._graphs = DecodeGraphs(decoder.decode_step, pad, self.device, pool)
                if self.prefill_graphs:
                    self._prefill_graphs = PrefillGraphs(
                        decoder, pool, self.batch_buckets, self._pad_column()[3:], self.stats
                    )
        return self._decoder

    def _step(self, admitted: list[_Request]) -> list[_Request]:
        """Decode running rows, prefill admitted ones (worker thread, under the lock)."""
        t0 = time.perf_counter()
        decoder = self._ensure_decoder()
        if self._rows:
            steps = 1 if admitted else self._chunk_steps(self._rows)
            self._decode(decoder, self._rows, steps)
            self.stats["decode_steps"] += steps
            self.stats["decode_chunks"] += 1
        t1 = time.perf_counter()  # both phases end in a host read of their tokens (a sync)
        if admitted:
            self._prefill(decoder, admitted)
            self._rows = self._rows + admitted
            self.stats["prefill_calls"] += 1
            self.stats["prefill_s"] += time.perf_counter() - t1
        done = self._retire()
        self.stats["busy_s"] += time.perf_counter() - t0  # worker time, vs the caller's wall
        return done

    def _chunk_steps(self, rows: list[_Request]) -> int:
        """Decode steps for this hop: while a waiting request could join the batch, up to its
        join (`join_every`; 1 by default), else up to `decode_chunk`; never past the step where
        some row must end on its length limit (so length-finished rows leave on time and no
        position runs past the cache)."""
        cap = self.decode_chunk
        if self._waiting and len(rows) < self.max_batch_size:
            cap = min(cap, self.join_every - 1 - self._since_join)
        if cap <= 1:
            return 1
        left = min(
            min(r.params.max_new_tokens, self.max_seq_len - len(r.prompt_ids)) - len(r.output_ids)
            for r in rows
        )
        return max(1, min(cap, left))

    def _decode(self, decoder: StaticDecoder, rows: list[_Request], steps: int = 1) -> None:
        cols = [self._column(req) for req in rows]
        need = int(max(c[1] for c in cols)) + steps  # attended key columns: [0, last position]
        mode = self._mode(rows)
        if self._graphs is not None:
            bucket = next(b for b in self.batch_buckets if b >= len(rows))
            cols += [self._pad_column()] * (bucket - len(rows))
            inp = torch.tensor(cols, dtype=torch.float64).T
            out = self._graphs.run(inp, _length_bucket(need, self.max_seq_len), mode, steps)
        else:
            inp = torch.tensor(cols, dtype=torch.float64).T.contiguous().to(self.device)
            outs = [decoder.decode_step(inp, need, mode) for _ in range(steps)]
            out = torch.stack(outs).cpu()
        n = len(rows)
        for step in out[:, :, :n].tolist():
            self._record(rows, [int(t) for t in step[0]], step[1])

    def _prefill_cost(self, req: _Request, admitted: list[_Request]) -> int:
        """With `share_prefill`, a prompt identical to one already admitted in this call
        costs nothing (it is copied, not computed), so a GRPO group is not split across
        admissions and computed twice."""
        if not self.share_prefill:
            return len(req.prompt_ids)
        if not admitted:  # a new admission: forget the previous one's prompts
            self._admitting = set()
        key = tuple(req.prompt_ids)
        if key in self._admitting:
            return 0
        self._admitting.add(key)
        return len(key)

    def _prefill(self, decoder: StaticDecoder, admitted: list[_Request]) -> None:
        """Prefill admitted rows (identical ones once, see `_prefix_share`) and sample each
        row's first token with its own seed."""
        plan, keys = [], []
        for req in admitted:
            req.weight_version = self._weight_version
            slot, reuse = self._pool.acquire(req.session_id, req.prompt_ids)
            self._row[req] = _Row(slot, *split_seed(req.generator.initial_seed()))
            plan.append((slot, reuse, req.prompt_ids[reuse:]))
            # The slot holds prompt_ids[:reuse], so equal keys mean equal cached prefixes.
            keys.append((reuse, tuple(req.prompt_ids)))
            self.stats["reused_tokens"] += reuse
        graphs = self._prefill_graphs
        share = keys if self.share_prefill else None
        prefill = graphs.prefill if graphs is not None else None
        logits, shared = prefill_shared(decoder, plan, share, prefill)
        self.stats["prefill_tokens"] += sum(len(t) for _, _, t in plan) - shared
        self.stats["prefill_tokens_shared"] += shared
        params = np.array([self._column(r)[3:] for r in admitted], dtype=np.float64).T
        mode = self._mode(admitted)
        if graphs is not None:
            out = graphs.sample(logits, params, mode).tolist()
            tokens, logps = [int(t) for t in out[0]], out[1]
        else:
            drawn, lp = sample_rows(logits, torch.from_numpy(params).to(self.device), mode)
            tokens, logps = drawn.tolist(), lp.tolist()
        self._record(admitted, tokens, logps)

    def _column(self, req: _Request) -> list[float]:
        """The decode input column of one row (see `_static_model.INPUT_ROWS`)."""
        row, p = self._row[req], req.params
        n_out = len(req.output_ids)
        tok = req.output_ids[-1] if n_out else 0
        pos = len(req.prompt_ids) + n_out - 1
        return [tok, pos, row.slot, row.seed_lo, row.seed_hi, n_out, p.temperature,
                p.top_k, p.top_p]  # fmt: skip

    def _pad_column(self) -> list[float]:
        return [0, 0, self._pool.n_slots, 0, 0, 0, 0.0, 0, 1.0]

    @staticmethod
    def _mode(rows: list[_Request]) -> int:
        ps: list[SamplingParams] = [r.params for r in rows]
        return pick_mode([p.temperature for p in ps], [p.top_k for p in ps], [p.top_p for p in ps])

    def _record(self, rows: list[_Request], tokens: list[int], logps: list[float]) -> None:
        for req, tok, lp in zip(rows, tokens, logps, strict=True):
            if req.finish is not None:
                continue
            req.output_ids.append(tok)
            req.logprobs.append(lp)
            req.versions.append(self._weight_version)
            req.finish = self._finish_reason(req, tok)

    def _retire(self) -> list[_Request]:
        """Finished rows leave; a session's slot is parked for its next turn."""
        keep, done = [], []
        for req in self._rows:
            if req.finish is None:
                keep.append(req)
                continue
            done.append(req)
            slot = self._row.pop(req).slot
            if req.session_id and self._keeps_session(req):
                self._pool.park(req.session_id, slot, req.prompt_ids + req.output_ids)
            else:
                self._pool.release(slot)
        self._rows = keep
        return done

    def _reset_rows(self) -> None:
        """A failed step or an abort: the running rows' slots go back to the pool."""
        for row in self._row.values():
            self._pool.release(row.slot)
        self._row.clear()


def capture_modes(sampling: Sequence[SamplingParams]) -> list[int]:
    """The decode graphs' sampling modes that batches of requests like these select."""
    return sorted({pick_mode([p.temperature], [p.top_k], [p.top_p]) for p in sampling})
