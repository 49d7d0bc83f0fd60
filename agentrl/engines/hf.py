"""HFEngine: the embedded default engine, a continuous-batching decoder over a transformers model.

Why it exists: rollouts run many asyncio episodes at once, each awaiting `generate()` between
tool calls. Calling `model.generate` per episode would decode them one by one; instead every
request joins one running batch between decode steps and leaves it as soon as it finishes.

This is the text layer over `_hf_core.HFCore` (which owns the request queue, the worker
thread, admission, stops, timeouts, sessions' lifetime, weight updates and failures), through
`_kv_rows.KVBatchRows` (finished rows leave the batch, shared with the vision engine). What is
here is the batch's forward and sampling:

- The KV cache is a single left-padded tensor per layer (see `_kvbatch`); rows are copied
  only when they join or leave.
- `session_id`: when a request finishes, its KV (prompt + output) is kept; the session's next
  prompt, if it extends those ids, prefills only the new suffix.
- Sampling (`_sampling`) honours constraints, top logprobs and per-token hooks.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.engines import _kvbatch as kvb
from agentrl.engines import _sampling as smp
from agentrl.engines._hf_core import Request
from agentrl.engines._kv_rows import KVBatchRows
from agentrl.models.batch_invariant import inv_temperature


class HFEngine(KVBatchRows):
    """Continuous-batching generation over a transformers causal LM (CPU or GPU)."""

    calls_transformers_modules = True  # its forward is the model's own

    features = frozenset({"constraint", "top_logprobs", "stream", "weight_versions", "admission"})

    def __init__(self, model: Any, tokenizer_or_eos_ids: Any, **kwargs: Any) -> None:
        """`HFCore`'s keyword arguments: max_batch_size=64, device=None, max_sessions=1024,
        request_timeout_s=None, keep_kv_on_update=False, tuning=HFTuning(), own_stream=True."""
        super().__init__(model, tokenizer_or_eos_ids, **kwargs)
        self._runner = kvb.ModelRunner(model)
        self._batch: kvb.KVBatch | None = None

    def _step(self, admitted: list[Request]) -> list[Request]:
        """Decode running rows, prefill admitted ones (worker thread, under the lock)."""
        if self._batch is not None:
            logits = kvb.decode(self._runner, self._batch)
            self._batch.next_tokens = self._sample(self._rows, logits)
            self.stats["decode_steps"] += 1
        if admitted:
            suffixes, prefixes = self._plan_prefill(admitted)
            logits, new = kvb.prefill(self._runner, suffixes, prefixes, self.device)
            new.next_tokens = self._sample(admitted, logits)
            self._batch = kvb.merge(self._runner, self._batch, new)
            self._rows = self._rows + admitted
        return self._retire()

    def _plan_prefill(self, reqs: list[Request]) -> tuple[list[list[int]], list[kvb.KV | None]]:
        """Per request: the suffix to prefill and the cached prefix KV it extends (if any)."""
        suffixes: list[list[int]] = []
        prefixes: list[kvb.KV | None] = []
        for req in reqs:
            sess, reuse = self._take_session(req)
            if sess is not None and reuse > 0:
                prefixes.append([(k[:, :, :reuse], v[:, :, :reuse]) for k, v in sess.kv])
            else:
                reuse = 0
                prefixes.append(None)
            suffixes.append(req.prompt_ids[reuse:])
            self.stats["prefill_tokens"] += len(req.prompt_ids) - reuse
            self.stats["reused_tokens"] += reuse
        return suffixes, prefixes

    def _sample(self, rows: list[Request], logits: torch.Tensor) -> torch.Tensor:
        dev = logits.device
        temp = torch.tensor([r.params.temperature for r in rows], device=dev)
        top_k = torch.tensor([r.params.top_k for r in rows], dtype=torch.long, device=dev)
        top_p = torch.tensor([r.params.top_p for r in rows], device=dev)
        live = [r.params.constraint if r.finish is None else None for r in rows]
        allowed, errors = smp.constraint_masks(live, logits.shape[-1], dev)
        for i, err in errors.items():  # a bad constraint fails its own request
            self._mark(rows[i], "error", f"constraint: {err}")
        # A row of NaN logits would sample token 0 (argmax takes NaN as the largest): a
        # model or attention-kernel fault must fail its request by name, not pass as output.
        for i in torch.isnan(logits).any(dim=-1).nonzero().flatten().tolist():
            self._mark(rows[i], "error", f"the model's logits are NaN ({logits.dtype}, {dev})")
        gens = [r.generator for r in rows]
        inv = [
            inv_temperature(r.params.temperature) if r.params.temperature > 0 else 1.0 for r in rows
        ]
        inv_temp = torch.tensor(inv, device=dev)  # the trainer's 1/T, rounded as it rounds it
        tokens, logps = smp.sample_tokens(logits, temp, top_k, top_p, gens, allowed, inv_temp)
        k = max(r.params.top_logprobs for r in rows)
        top = smp.top_logprobs(logits, temp, k) if k > 0 else None
        for i, (req, tok, lp) in enumerate(zip(rows, tokens.tolist(), logps.tolist(), strict=True)):
            if req.finish is not None:
                continue
            req.output_ids.append(tok)
            req.logprobs.append(lp)
            req.versions.append(self._weight_version)  # under the lock update_weights takes
            top_i = smp.top_pairs(top, i, req.params.top_logprobs) if top is not None else []
            if req.params.top_logprobs > 0:
                req.top.append(top_i)
            req.finish = self._finish_reason(req, tok)
            error = smp.run_hooks(req.params, tok, lp, top_i, req.finish is None)
            if error:
                self._mark(req, "error", error)
        return tokens
