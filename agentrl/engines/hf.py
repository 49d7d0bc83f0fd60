"""HFEngine: the embedded default engine, a continuous-batching decoder over a transformers model.

Why it exists: rollouts run many asyncio episodes at once, each awaiting `generate()` between
tool calls. Calling `model.generate` per episode would decode them one by one; instead every
request joins one running batch between decode steps and leaves it as soon as it finishes.

- One background asyncio task owns the batch. Each step (one forward for the running rows,
  one prefill forward for newly admitted rows) runs in the engine's own worker thread, so
  env/tool I/O on the event loop stays responsive while the model computes, and env work
  queued in asyncio's default executor (`areset`/`astep`) never delays a decode step.
- Admission window: when the batch is empty, the first request waits (`admission_window_s`
  per tick, while more keep arriving) so a rollout's episodes, which reach `generate()` over a
  few milliseconds, share one prefill and decode in lockstep instead of trickling in.
- The KV cache is a single left-padded tensor per layer (see `_kvbatch`); rows are copied
  only when they join or leave.
- `session_id`: when a request finishes, its KV (prompt + output) is kept; the session's next
  prompt, if it extends those ids, prefills only the new suffix. `update_weights` drops them.
- Failures never hang callers: a failed step resolves its rows with finish_reason "error",
  and the loop's exit (close, cancellation, crash) resolves everything still pending.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.engines import _kvbatch as kvb
from agentrl.engines import _sampling as smp
from agentrl.engines.base import Engine, EngineError, FinishReason, GenerateResult, SamplingParams


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    session_id: str | None
    future: asyncio.Future[GenerateResult]
    generator: torch.Generator
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: FinishReason | None = None
    error: str | None = None
    weight_version: int = 0
    versions: list[int] = field(default_factory=list)  # per sampled token

    def result(self) -> GenerateResult:
        out, lps, top = list(self.output_ids), list(self.logprobs), list(self.top)
        return GenerateResult(
            out, lps, self.finish or "abort", self.error, top, list(self.versions)
        )


@dataclass
class _Session:
    ids: list[int]  # prompt + output of the session's last request
    kv: kvb.KV  # covers ids[:-1] (the last sampled token was never fed back)


class HFEngine(Engine):
    """Continuous-batching generation over a transformers causal LM (CPU or GPU)."""

    features = frozenset({"constraint", "top_logprobs", "stream", "weight_versions"})

    def __init__(
        self,
        model: Any,
        tokenizer_or_eos_ids: Any,
        *,
        max_batch_size: int = 64,
        device: str | torch.device | None = None,
        max_prefill_tokens: int = 8192,
        max_sessions: int = 1024,
        request_timeout_s: float | None = None,
        admission_window_s: float = 0.002,
    ) -> None:
        if device is not None:
            model.to(device)
        self.model = model.eval()
        self.device = torch.device(device) if device else next(model.parameters()).device
        self.tokenizer, self.eos_ids = _split_tokenizer(model, tokenizer_or_eos_ids)
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.max_sessions = max_sessions
        self.request_timeout_s = request_timeout_s
        self.admission_window_s = max(0.0, float(admission_window_s))
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self.stats: collections.Counter[str] = collections.Counter()
        self._runner = kvb.ModelRunner(model)
        self._lock = threading.Lock()  # model use vs update_weights / sleep
        self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        self._weight_version = 0
        self._closed = False
        self._asleep = False
        self._waiting: collections.deque[_Request] = collections.deque()
        self._rows: list[_Request] = []
        self._batch: kvb.KVBatch | None = None
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentrl-hf")

    # ---------------------------------------------------------------- public API

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        self._validate(prompt_ids, params, multimodal)
        if params.max_new_tokens <= 0:
            return GenerateResult([], [], "length")
        loop = asyncio.get_running_loop()
        self._ensure_loop(loop)
        req = _Request(
            [int(t) for t in prompt_ids],
            params,
            session_id,
            loop.create_future(),
            self._new_generator(params.seed),
        )
        self._waiting.append(req)
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            return await asyncio.wait_for(asyncio.shield(req.future), self.request_timeout_s)
        except asyncio.TimeoutError:
            self._mark(req, "abort", f"timed out after {self.request_timeout_s}s")
            return req.result()
        except asyncio.CancelledError:
            self._mark(req, "abort", "cancelled")
            raise

    def _new_generator(self, seed: int | None) -> torch.Generator:
        """The request's RNG (the fast path only needs its seed, so it overrides this)."""
        return smp.make_generator(self.device, seed)

    @property
    def weight_version(self) -> int:
        return self._weight_version

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy tensors into the model in place (strict names); drops all session caches."""
        state = self.model.state_dict()
        items = list(named_tensors)
        unknown = [name for name, _ in items if name not in state]
        if unknown:
            raise EngineError(f"update_weights: unknown parameter names {unknown[:5]}")
        bad = [n for n, t in items if tuple(t.shape) != tuple(state[n].shape)]
        if bad:
            raise EngineError(f"update_weights: shape mismatch for {bad[:5]}")
        with self._lock, torch.no_grad():
            for name, tensor in items:
                target = state[name]
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            self._weight_version += 1
            self._sessions.clear()

    def release_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def sleep(self) -> None:
        """Move the model off the GPU between rollouts (no-op on CPU)."""
        if self._rows or self._waiting:
            raise EngineError("sleep() while requests are in flight")
        with self._lock:
            self._sessions.clear()
            if self.device.type != "cpu":
                self.model.to("cpu")
                torch.cuda.empty_cache()
            self._asleep = True

    def wake(self) -> None:
        with self._lock:
            if self._asleep and self.device.type != "cpu":
                self.model.to(self.device)
            self._asleep = False

    async def close(self) -> None:
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is not _running_loop():
            with contextlib.suppress(RuntimeError):
                task.cancel()
        elif task is not None and not task.done():
            try:
                await asyncio.wait_for(task, timeout=30)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
        self._abort_all("engine closed")
        self._worker.shutdown(wait=False)

    # ---------------------------------------------------------------- the loop

    def _ensure_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._closed:
            raise EngineError("engine is closed")
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its loop may already be closed
                task.cancel()
        self._abort_all("event loop changed")
        self._wakeup = asyncio.Event()
        self._task = loop.create_task(self._run(), name="agentrl-hf-engine")

    async def _run(self) -> None:
        assert self._wakeup is not None
        wakeup = self._wakeup
        try:
            while not self._closed:
                if not self._waiting and not self._rows:
                    wakeup.clear()
                    await wakeup.wait()
                    continue
                if not self._rows:
                    await self._await_stragglers()
                admitted = self._admit()
                try:
                    loop = asyncio.get_running_loop()
                    done = await loop.run_in_executor(self._worker, self._step, admitted)
                except Exception as exc:  # a failed step fails its rows, not the engine
                    done = self._fail_rows(admitted, f"{type(exc).__name__}: {exc}")
                for req in done:
                    _resolve(req)
        finally:
            self._abort_all("engine loop stopped")

    async def _await_stragglers(self) -> None:
        """Idle engine, requests arrived: tick while more keep arriving (at most 10 ticks),
        so one admission takes them all. A lone request pays one tick."""
        seen = -1
        for _ in range(10):
            n = len(self._waiting)
            if self.admission_window_s <= 0 or n == seen or n >= self.max_batch_size:
                return
            seen = n
            await asyncio.sleep(self.admission_window_s)

    def _admit(self) -> list[_Request]:
        """Waiting requests that join this step, within the batch size and prefill budget."""
        admitted: list[_Request] = []
        budget = self.max_prefill_tokens
        while self._waiting and len(self._rows) + len(admitted) < self.max_batch_size:
            req = self._waiting[0]
            cost = self._prefill_cost(req, admitted)
            if req.finish is None and admitted and cost > budget:
                break
            self._waiting.popleft()
            if req.finish is not None:
                _resolve(req)
                continue
            budget -= cost
            admitted.append(req)
        return admitted

    def _prefill_cost(self, req: _Request, admitted: list[_Request]) -> int:
        """Prefill tokens `req` adds to this step (subclasses that share prefill discount)."""
        return len(req.prompt_ids)

    def _step(self, admitted: list[_Request]) -> list[_Request]:
        """One engine step (worker thread): decode running rows, prefill admitted ones."""
        with self._lock, torch.inference_mode():
            if self._asleep:
                raise EngineError("engine is asleep; call wake() first")
            if self._batch is not None:
                logits = kvb.decode(self._runner, self._batch)
                self._batch.next_tokens = self._sample(self._rows, logits)
                self.stats["decode_steps"] += 1
            if admitted:
                for req in admitted:
                    req.weight_version = self._weight_version
                suffixes, prefixes = self._plan_prefill(admitted)
                logits, new = kvb.prefill(self._runner, suffixes, prefixes, self.device)
                new.next_tokens = self._sample(admitted, logits)
                self._batch = kvb.merge(self._runner, self._batch, new)
                self._rows = self._rows + admitted
            return self._retire()

    def _plan_prefill(self, reqs: list[_Request]) -> tuple[list[list[int]], list[kvb.KV | None]]:
        """Per request: the suffix to prefill and the cached prefix KV it extends (if any)."""
        suffixes: list[list[int]] = []
        prefixes: list[kvb.KV | None] = []
        for req in reqs:
            sess = self._sessions.pop(req.session_id, None) if req.session_id else None
            reuse = _common_prefix(sess.ids, req.prompt_ids) if sess else 0
            reuse = min(reuse, len(req.prompt_ids) - 1, sess.kv[0][0].shape[2] if sess else 0)
            if sess is not None and reuse > 0:
                prefixes.append([(k[:, :, :reuse], v[:, :, :reuse]) for k, v in sess.kv])
            else:
                reuse = 0
                prefixes.append(None)
            suffixes.append(req.prompt_ids[reuse:])
            self.stats["prefill_tokens"] += len(req.prompt_ids) - reuse
            self.stats["reused_tokens"] += reuse
        return suffixes, prefixes

    def _sample(self, rows: list[_Request], logits: torch.Tensor) -> torch.Tensor:
        dev = logits.device
        temp = torch.tensor([r.params.temperature for r in rows], device=dev)
        top_k = torch.tensor([r.params.top_k for r in rows], dtype=torch.long, device=dev)
        top_p = torch.tensor([r.params.top_p for r in rows], device=dev)
        live = [r.params.constraint if r.finish is None else None for r in rows]
        allowed, errors = smp.constraint_masks(live, logits.shape[-1], dev)
        for i, err in errors.items():  # a bad constraint fails its own request
            self._mark(rows[i], "error", f"constraint: {err}")
        gens = [r.generator for r in rows]
        tokens, logps = smp.sample_tokens(logits, temp, top_k, top_p, gens, allowed)
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

    def _finish_reason(self, req: _Request, token: int) -> FinishReason | None:
        p = req.params
        if token in self.eos_ids or token in p.stop_token_ids:
            return "stop"
        if p.stop and self.tokenizer is not None:
            window = max(len(s) for s in p.stop) + 4
            tail = self.tokenizer.decode(req.output_ids[-window:], skip_special_tokens=False)
            if any(s in tail for s in p.stop):
                return "stop"
        if len(req.output_ids) >= p.max_new_tokens:
            return "length"
        if len(req.prompt_ids) + len(req.output_ids) >= self.max_positions:
            return "length"
        return None

    def _retire(self) -> list[_Request]:
        """Remove finished rows from the batch, keeping their KV for their session."""
        keep, done = [], []
        for i, req in enumerate(self._rows):
            if req.finish is None:
                keep.append(i)
                continue
            done.append(req)
            ok = req.finish in ("stop", "length") and req.weight_version == self._weight_version
            if req.session_id and ok and self._batch is not None:
                kv = kvb.extract_row(self._runner, self._batch, i)
                self._store_session(req.session_id, req.prompt_ids + req.output_ids, kv)
        if self._batch is not None:
            self._batch = kvb.select(self._runner, self._batch, keep)
        self._rows = [self._rows[i] for i in keep]
        return done

    def _store_session(self, session_id: str, ids: list[int], kv: kvb.KV) -> None:
        self._sessions[session_id] = _Session(ids, kv)
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    # ---------------------------------------------------------------- failure paths

    def _fail_rows(self, admitted: list[_Request], error: str) -> list[_Request]:
        """A step raised: every row it touched fails; the batch starts over empty."""
        failed = list(dict.fromkeys(self._rows + admitted))
        for req in failed:
            self._mark(req, "error", error)
        self._rows, self._batch = [], None
        self.stats["failed_steps"] += 1
        return failed

    def _abort_all(self, reason: str) -> None:
        with self._lock:  # waits out a step still running in the worker thread
            pending = list(self._waiting) + self._rows
            self._waiting.clear()
            self._rows, self._batch = [], None
        for req in pending:
            self._mark(req, "abort", reason)
            _resolve(req)

    @staticmethod
    def _mark(req: _Request, finish: FinishReason, error: str) -> None:
        if req.finish is None or finish == "error":
            req.finish, req.error = finish, error

    def _validate(self, prompt_ids: Sequence[int], params: SamplingParams, multimodal: Any) -> None:
        if multimodal:
            raise EngineError(
                "the hf engine is text-only; for vision-language models use HFVisionEngine "
                "(model.enable_vision=true) or vllm/sglang"
            )
        if not prompt_ids:
            raise EngineError("empty prompt")
        if len(prompt_ids) >= self.max_positions:
            raise EngineError(f"prompt of {len(prompt_ids)} tokens >= {self.max_positions}")
        if params.stop and self.tokenizer is None:
            raise EngineError("stop strings need a tokenizer; pass one instead of eos ids")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(req: _Request) -> None:
    if req.future.done():
        return
    try:
        req.future.set_result(req.result())
    except RuntimeError:  # the future's event loop is already closed
        pass


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _split_tokenizer(model: Any, tok_or_ids: Any) -> tuple[Any, frozenset[int]]:
    """(tokenizer or None, eos ids): the tokenizer's eos plus the model's generation eos."""
    ids: set[int] = set()
    tokenizer = tok_or_ids if hasattr(tok_or_ids, "decode") else None
    if tokenizer is not None:
        raw: Any = tokenizer.eos_token_id
    else:
        raw = tok_or_ids
    gen_cfg = getattr(model, "generation_config", None)
    for value in (raw, getattr(gen_cfg, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return tokenizer, frozenset(ids)
