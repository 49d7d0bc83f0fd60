"""The in-process hf engines' one core: request queue, worker thread, admission, sessions, weights.

Why: the text engine (`HFEngine`), its GPU fast path (`FastHFEngine`) and the vision engine
(`HFVisionEngine`) differ only in their batch state and forward. Everything a caller sees is
here, once: queueing, continuous batching, the admission window, stop rules, timeouts and
cancellation, session lifetime, all-or-nothing weight updates, sleep/wake, and failures that
end the requests they touched and nothing else. A layer implements `_step(admitted)` (decode
the running rows, prefill the admitted ones, return the finished ones; runs on the worker
thread under the engine lock) and `_reset_rows()` (forget the batch after a failure/abort).

- One asyncio task per event loop owns the queue. Each step runs in the engine's own
  single-thread executor, never asyncio's default one, where env work (`areset`/`astep`)
  queues: env and tool I/O never delay a decode step (tests/engines/test_admission.py).
- Admission window: when the batch is empty, the first request waits (`admission_window_s`
  per tick, while more keep arriving) so a rollout's episodes, which reach `generate()` a few
  milliseconds apart, share one prefill instead of trickling in. While rows decode, waiting
  requests join every `join_every` decode steps (1: the next step): fewer, larger prefill
  calls, each with a fixed host cost, for up to `join_every - 1` steps of join latency (as
  vLLM's scheduler delay factor).
- Device work runs on the engine's own high-priority CUDA stream (`_stream`), so a decode
  step never queues behind a pipelined update's kernels on the trainer's stream.
- Failures never hang callers: a failed step resolves its rows with finish_reason "error",
  and the loop's exit (close, cancellation, crash) resolves everything still pending.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch

from agentrl.config.engine import HFTuning
from agentrl.engines import _sampling as smp
from agentrl.engines._hf_request import Request, Session, resolve, tell_admitted
from agentrl.engines._stream import EngineStream
from agentrl.engines.base import Engine, EngineError, FinishReason, GenerateResult, SamplingParams

__all__ = ["HFCore", "Request", "Session", "common_prefix", "resolve"]


class HFCore(Engine):
    """Continuous batching over a transformers model; subclasses own the batch and forward."""

    can_sleep = True  # sleep() moves the model to CPU (and frees layer state) on GPU engines

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
        tuning: HFTuning | None = None,
        own_stream: bool = True,
    ) -> None:
        """`tuning`: the speed knobs (`engine.hf.tuning`, default `HFTuning()`).
        `own_stream` (a code-level lever, kept for comparison): decode on the engine's own
        high-priority CUDA stream; false: the worker thread's current stream."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.tuning = tuning = tuning if tuning is not None else HFTuning()
        tuning.check(type(self).__name__)
        if device is not None:
            model.to(device)
        self.model = model.eval()
        self.device = torch.device(device) if device else next(model.parameters()).device
        self._dev = EngineStream(self.device, own_stream)  # where device work runs (_stream)
        self.tokenizer, self.eos_ids = split_tokenizer(model, tokenizer_or_eos_ids)
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = tuning.max_prefill_tokens
        self.max_sessions = max_sessions
        self.request_timeout_s = request_timeout_s
        self.admission_window_s = float(tuning.admission_window_s)
        self.join_every, self._since_join = int(tuning.join_every), 0  # decode steps
        self.keep_kv_on_update = bool(keep_kv_on_update)
        self.max_positions = max_positions(model.config)
        # A Counter (a missing key reads 0) of counts and seconds; typeshed's holds ints only.
        self.stats = cast("dict[str, float]", collections.Counter())
        self._lock = threading.RLock()  # model use (one step) vs update_weights / sleep
        self._sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self._drops: list[str] = []  # release_session ids the next step applies
        self._weight_version = 0
        self._closed = False
        self._asleep = False
        self._waiting: collections.deque[Request] = collections.deque()
        self._rows: list[Request] = []  # running, in the layer's batch order
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentrl-hf")

    # ---------------------------------------------------------------- what a layer provides

    @abstractmethod
    def _step(self, admitted: list[Request]) -> list[Request]:
        """Worker thread, under the lock: decode the running rows, prefill `admitted`, and
        return the rows that finished (removed from `_rows`)."""

    @abstractmethod
    def _reset_rows(self) -> None:
        """Forget the batch state (under the lock): a step failed or everything was aborted."""

    def _drop_all_sessions(self) -> None:
        self._sessions.clear()

    def _drop_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def _release_device_state(self) -> None:
        """`sleep()`: free what the layer holds on the device beyond the model."""

    def _new_generator(self, seed: int | None) -> torch.Generator:
        return smp.make_generator(self.device, seed)

    def _prefill_cost(self, req: Request, admitted: list[Request]) -> int:
        """Prefill tokens `req` adds to this step (layers that share prefill discount)."""
        return len(req.prompt_ids)

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
        ids = [int(t) for t in prompt_ids]
        gen = self._new_generator(params.seed)
        req = Request(ids, params, session_id, loop.create_future(), gen, multimodal or None)
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

    @property
    def weight_version(self) -> int:
        return self._weight_version

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy tensors into the model in place. Every name and shape is checked before
        anything is copied, so a bad update leaves the weights untouched. Parked sessions are
        dropped, unless `keep_kv_on_update` (then they keep KV the old weights computed, as
        running rows always do)."""
        state = self.model.state_dict()
        items = list(named_tensors)
        unknown = [name for name, _ in items if name not in state]
        if unknown:
            raise EngineError(f"update_weights: unknown parameter names {unknown[:5]}")
        bad = [n for n, t in items if tuple(t.shape) != tuple(state[n].shape)]
        if bad:
            raise EngineError(f"update_weights: shape mismatch for {bad[:5]}")
        with self._lock, torch.no_grad(), self._dev.exchange():
            for name, tensor in items:
                target = state[name]
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            self._weight_version += 1
            if not self.keep_kv_on_update:
                self._drop_all_sessions()

    def release_session(self, session_id: str) -> None:
        """Applied now if the engine is idle, else by the next step (never blocks the loop)."""
        self._drops.append(session_id)
        if self._lock.acquire(blocking=False):
            try:
                self._apply_drops()
            finally:
                self._lock.release()

    def sleep(self) -> None:
        """Free the accelerator between phases: sessions and layer state go, the model moves
        to CPU (a no-op on CPU). Requests fail until `wake()`. Rows whose callers already gave
        up (timed out, cancelled) and that no step has retired yet are dropped."""
        with self._lock, self._dev.scope():
            if any(req.finish is None for req in [*self._rows, *self._waiting]):
                raise EngineError("sleep() while requests are in flight")
            self._waiting.clear()
            self._rows = []
            self._reset_rows()
            self._drop_all_sessions()
            self._release_device_state()
            if self.device.type != "cpu":
                self.model.to("cpu")
                torch.cuda.empty_cache()
            self._asleep = True

    def wake(self) -> None:
        with self._lock, self._dev.scope():
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
        with self._lock:
            self._drop_all_sessions()
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
                joins = not self._rows or self._since_join >= self.join_every - 1
                admitted = self._admit() if joins else []
                steps = self.stats["decode_steps"]
                try:
                    loop = asyncio.get_running_loop()
                    done = await loop.run_in_executor(self._worker, self._locked_step, admitted)
                except Exception as exc:  # a failed step fails its rows, not the engine
                    done = self._fail_rows(admitted, f"{type(exc).__name__}: {exc}")
                steps = int(self.stats["decode_steps"] - steps)
                self._since_join = 0 if admitted else self._since_join + steps
                for req in done:
                    resolve(req)
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

    def _admit(self) -> list[Request]:
        """Waiting requests that join this step, within the batch size and prefill budget."""
        admitted: list[Request] = []
        budget = self.max_prefill_tokens
        while self._waiting and len(self._rows) + len(admitted) < self.max_batch_size:
            req = self._waiting[0]
            cost = self._prefill_cost(req, admitted)
            if req.finish is None and admitted and cost > budget:
                break
            self._waiting.popleft()
            if req.finish is not None:  # cancelled or timed out while waiting
                resolve(req)
                continue
            if not tell_admitted(req):
                continue
            budget -= cost
            admitted.append(req)
        return admitted

    def _locked_step(self, admitted: list[Request]) -> list[Request]:
        with self._lock, torch.inference_mode(), self._dev.scope():
            if self._asleep:
                raise EngineError("engine is asleep; call wake() first")
            self._apply_drops()
            for req in admitted:
                req.weight_version = self._weight_version
            return self._step(admitted)

    def _apply_drops(self) -> None:
        while self._drops:
            self._drop_session(self._drops.pop())

    # ---------------------------------------------------------------- helpers for layers

    def _finish_reason(self, req: Request, token: int) -> FinishReason | None:
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

    def _keeps_session(self, req: Request) -> bool:
        """Whether a finished row's KV is stored for its session's next turn: with
        `keep_kv_on_update` (PipelineRL style) always; otherwise only if one policy computed
        all of it (no weight update since the row was admitted)."""
        one_policy = self.keep_kv_on_update or req.weight_version == self._weight_version
        return bool(req.session_id) and req.finish in ("stop", "length") and one_policy

    def _take_session(self, req: Request) -> tuple[Session | None, int]:
        """The request's session (removed from the store) and how many prompt tokens its
        cache covers (never the whole prompt: the last token is always prefilled)."""
        sess = self._sessions.pop(req.session_id, None) if req.session_id else None
        if sess is None:
            return None, 0
        kv_len = int(sess.kv[0][0].shape[2])
        return sess, min(common_prefix(sess.ids, req.prompt_ids), len(req.prompt_ids) - 1, kv_len)

    def _store_session(self, session_id: str, ids: list[int], kv: Any) -> None:
        self._sessions[session_id] = Session(ids, kv)
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    # ---------------------------------------------------------------- failure paths

    def _fail_rows(self, admitted: list[Request], error: str) -> list[Request]:
        """A step raised: every row it touched fails; the batch starts over empty."""
        failed = list(dict.fromkeys(self._rows + admitted))
        for req in failed:
            self._mark(req, "error", error)
        with self._lock:
            self._rows = []
            self._reset_rows()
        self.stats["failed_steps"] += 1
        return failed

    def _abort_all(self, reason: str) -> None:
        with self._lock:  # waits out a step still running in the worker thread
            pending = list(self._waiting) + self._rows
            self._waiting.clear()
            self._rows = []
            self._reset_rows()
        for req in pending:
            self._mark(req, "abort", reason)
            resolve(req)

    @staticmethod
    def _mark(req: Request, finish: FinishReason, error: str) -> None:
        if req.finish is None or finish == "error":
            req.finish, req.error = finish, error

    def _validate(self, prompt_ids: Sequence[int], params: SamplingParams, multimodal: Any) -> None:
        name = type(self).__name__
        if multimodal and self.multimodal_inputs == "none":
            raise EngineError(
                f"{name} is text-only; for vision-language models use HFVisionEngine "
                "(model.enable_vision=true) or vllm/sglang"
            )
        asked = {
            "constraint": params.constraint is not None,
            "top_logprobs": params.top_logprobs > 0,
            "stream": params.on_token is not None,
            "admission": params.on_admit is not None,
        }
        if missing := [f for f, on in asked.items() if on and f not in self.features]:
            raise EngineError(f"{name} has no {'/'.join(missing)}; use HFEngine")
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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids `a` and `b` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def max_positions(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "max_position_embeddings", 1 << 30))


def split_tokenizer(model: Any, tok_or_ids: Any) -> tuple[Any, frozenset[int]]:
    """(tokenizer or None, eos ids): the tokenizer's eos plus the model's generation eos."""
    ids: set[int] = set()
    tokenizer = tok_or_ids if hasattr(tok_or_ids, "decode") else None
    raw: Any = tokenizer.eos_token_id if tokenizer is not None else tok_or_ids
    gen_cfg = getattr(model, "generation_config", None)
    for value in (raw, getattr(gen_cfg, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return tokenizer, frozenset(ids)
