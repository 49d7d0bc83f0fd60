"""The running rows of an hf engine whose batch is one `_kvbatch.KVBatch`: `HFEngine` and
`HFVisionEngine` (the fast engine keeps slots instead, `_slots`).

Why a layer of its own: both engines retire rows the same way (finished rows leave the batch,
their KV kept for their session's next turn) and forget the batch the same way after a failure;
written in each engine it was a copy the two would drift apart in."""

from __future__ import annotations

from agentrl.engines import _kvbatch as kvb
from agentrl.engines._hf_core import HFCore, Request


class KVBatchRows(HFCore):
    """`HFCore` plus a running batch held as one left-aligned KV cache (`_batch`, built by the
    subclass's `_step` through `_runner`)."""

    _runner: kvb.ModelRunner
    _batch: kvb.KVBatch | None

    def _reset_rows(self) -> None:
        self._batch = None

    def _retire(self) -> list[Request]:
        """Finished (or cancelled) rows leave the batch, keeping their KV for their session."""
        keep, done = [], []
        for i, req in enumerate(self._rows):
            if req.finish is None:
                keep.append(i)
                continue
            done.append(req)
            if self._keeps_session(req) and self._batch is not None:
                kv = kvb.extract_row(self._runner, self._batch, i)
                assert req.session_id is not None
                self._store_session(req.session_id, req.prompt_ids + req.output_ids, kv)
        if self._batch is not None:
            self._batch = kvb.select(self._runner, self._batch, keep)  # None when none is left
        self._rows = [self._rows[i] for i in keep]
        return done
