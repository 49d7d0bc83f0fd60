"""HFVisionEngine: generation for Qwen-VL family models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

Why a separate engine: the batching `HFEngine` assumes 1D positions (`arange`) for every row.
Qwen2-VL uses 3D M-RoPE: image tokens get (t, h, w) grid positions and the text after an image
continues from `max(previous positions) + 1`, so a sequence's positions are not its indices.
Here each request is prefilled with positions from the model's own `get_rope_index` over the
full prompt (exactly what the trainer's forward computes from `mm_token_type_ids`), and every
decoded token continues at `max(prompt positions) + 1 + k`, the rule `get_rope_index` applies
to trailing text. Logprobs therefore match the trainer's recompute to float tolerance.

A worker thread prefills each request on its own (its own images and positions), then decodes
all requests past prefill together, up to `max_batch_size` rows per forward (`_vision_batch`);
new requests join between decode steps. A session keeps its KV and, when the next turn's
prompt extends it, prefills only the new suffix with only the images whose placeholders lie in
that suffix. `update_weights` drops all sessions.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.engines import _kvbatch as kvb
from agentrl.engines import _vision_batch as vb
from agentrl.engines._sampling import make_generator
from agentrl.engines._vision_batch import VisionRequest, sample_rows, settle
from agentrl.engines.base import (
    Engine,
    EngineError,
    FinishReason,
    GenerateResult,
    SamplingParams,
    error_result,
)


@dataclass
class _Session:
    ids: list[int]  # prompt + output of the session's last request
    kv: kvb.KV  # [1, H, n, D] per layer; covers ids[:-1] (the last sampled token never fed back)


class HFVisionEngine(Engine):
    """Per-request prefill + batched decode over a transformers VLM (CPU or GPU)."""

    # The rollout passes processed pixel inputs (not PIL images) to this engine.
    multimodal_inputs = "processed"

    def __init__(
        self,
        model: Any,
        tokenizer_or_eos_ids: Any,
        *,
        device: str | torch.device | None = None,
        max_sessions: int = 256,
        max_batch_size: int = 16,
        request_timeout_s: float | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if device is not None:
            model.to(device)
        self.model = model.eval()
        self.device = torch.device(device) if device else next(model.parameters()).device
        self.tokenizer = tokenizer_or_eos_ids if hasattr(tokenizer_or_eos_ids, "decode") else None
        self.eos_ids = _eos_ids(model, tokenizer_or_eos_ids)
        cfg = model.config
        self.image_token_id = int(cfg.image_token_id)
        video = getattr(cfg, "video_token_id", None)
        self._banned = [self.image_token_id] + ([int(video)] if video is not None else [])
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self.max_positions = int(getattr(text, "max_position_embeddings", 1 << 30))
        self.max_sessions = max_sessions
        self.max_batch_size = max_batch_size
        self.request_timeout_s = request_timeout_s
        self.stats: collections.Counter[str] = collections.Counter()
        self._runner = kvb.ModelRunner(model)
        self._cache_kw = self._runner._cache_kw
        self._lock = threading.Lock()  # model use (one worker step) vs update_weights / sleep
        self._cv = threading.Condition()  # guards _waiting / _closed, wakes the worker
        self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        self._waiting: collections.deque[VisionRequest] = collections.deque()
        self._rows: list[VisionRequest] = []  # decoding, in `_batch` row order
        self._batch: kvb.KVBatch | None = None
        self._thread: threading.Thread | None = None
        self._weight_version = 0
        self._closed = False

    # ---------------------------------------------------------------- public API

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        if self._closed:
            raise EngineError("engine is closed")
        if not prompt_ids:
            raise EngineError("empty prompt")
        if len(prompt_ids) >= self.max_positions:
            raise EngineError(f"prompt of {len(prompt_ids)} tokens >= {self.max_positions}")
        if params.max_new_tokens <= 0:
            return GenerateResult([], [], "length")
        ids = [int(t) for t in prompt_ids]
        future: concurrent.futures.Future[GenerateResult] = concurrent.futures.Future()
        gen = make_generator(self.device, params.seed)
        self._submit(VisionRequest(ids, params, multimodal, session_id, future, gen))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.request_timeout_s)
        except asyncio.TimeoutError:  # the cancelled future makes the worker drop the row
            return GenerateResult([], [], "abort", f"timed out after {self.request_timeout_s}s")

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy tensors into the model in place (strict names); drops all session caches."""
        state = self.model.state_dict()
        items = list(named_tensors)
        unknown = [name for name, _ in items if name not in state]
        if unknown:
            raise EngineError(f"update_weights: unknown parameter names {unknown[:5]}")
        with self._lock, torch.no_grad():
            for name, tensor in items:
                target = state[name]
                if tuple(tensor.shape) != tuple(target.shape):
                    raise EngineError(f"update_weights: shape mismatch for {name}")
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            self._weight_version += 1
            self._sessions.clear()

    def release_session(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def sleep(self) -> None:
        if self._rows or self._waiting:
            raise EngineError("sleep() while requests are in flight")
        with self._lock:
            self._sessions.clear()
            if self.device.type != "cpu":
                self.model.to("cpu")
                torch.cuda.empty_cache()

    def wake(self) -> None:
        with self._lock:
            if self.device.type != "cpu":
                self.model.to(self.device)

    async def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 30)
        self._abort_all("engine closed")
        with self._lock:
            self._sessions.clear()

    # ---------------------------------------------------------------- the worker

    def _submit(self, req: VisionRequest) -> None:
        with self._cv:
            if self._closed:
                raise EngineError("engine is closed")
            self._waiting.append(req)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="agentrl-hf-vision", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def _work(self) -> None:
        """Worker thread: each step decodes the running rows, then prefills admitted ones. It
        exits after a second idle (`_submit` starts a new one), so an engine dropped without
        `close()` does not pin its model in a parked thread."""
        while True:
            with self._cv:
                if not self._closed and not self._waiting and not self._rows:
                    self._cv.wait(timeout=1.0)
                    if not self._closed and not self._waiting and not self._rows:
                        self._thread = None
                        return
                if self._closed:
                    break
                room = self.max_batch_size - len(self._rows)
                admitted = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
            try:
                with self._lock, torch.inference_mode():
                    if self._batch is not None:
                        self._decode_rows()
                    for req in admitted:
                        self._start(req)
            except Exception as e:  # noqa: BLE001 - a failed step fails its rows, not the engine
                self._fail_rows(self._rows + admitted, e)
        self._abort_all("engine closed")

    def _decode_rows(self) -> None:
        """One batched decode step; finished (or cancelled) rows leave the batch."""
        assert self._batch is not None
        logits = vb.decode(self._runner, self._batch)
        tokens = self._record(self._rows, logits)
        self._batch.next_tokens = torch.tensor(tokens, device=self._batch.mask.device)
        self.stats["decode_steps"] += 1
        self.stats["decode_rows"] += len(self._rows)
        keep = []
        for i, req in enumerate(self._rows):
            if req.finish is None and not req.future.done():
                keep.append(i)
            else:
                keep_kv = self._keeps_session(req)
                self._done(req, kvb.extract_row(self._runner, self._batch, i) if keep_kv else None)
        self._batch = kvb.select(self._runner, self._batch, keep)
        self._rows = [self._rows[i] for i in keep]

    def _start(self, req: VisionRequest) -> None:
        """Prefill one admitted request and sample its first token; it then joins the batch."""
        if req.future.done():  # cancelled while waiting
            return
        try:
            logits, cache, next_pos = self._prefill_request(req)
            req.weight_version = self._weight_version
            (token,) = self._record([req], logits)
            if req.finish is not None:
                kv = self._runner.tensors(cache) if self._keeps_session(req) else None
                self._done(req, kv)
                return
            self._batch = vb.join(self._runner, self._batch, cache, next_pos, token)
            self._rows.append(req)
        except EngineError as e:
            settle(req.future, exc=e)
        except Exception as e:  # noqa: BLE001 - reported as this request's error
            settle(req.future, error_result(e))

    def _record(self, rows: list[VisionRequest], logits: torch.Tensor) -> list[int]:
        tokens, lps = sample_rows(rows, logits, self._banned)
        for req, tok, lp in zip(rows, tokens, lps, strict=True):
            req.out.append(tok)
            req.lps.append(lp)
            req.finish = self._finish(req.ids, req.out, req.params)
        return tokens

    def _keeps_session(self, req: VisionRequest) -> bool:
        ok = req.finish in ("stop", "length") and not req.future.done()
        return bool(req.session) and ok and req.weight_version == self._weight_version

    def _done(self, req: VisionRequest, kv: kvb.KV | None) -> None:
        if kv is not None and req.session:
            self._store(req.session, _Session(req.ids + req.out, kv))
        self.stats["requests"] += 1
        settle(req.future, req.result())

    def _fail_rows(self, reqs: list[VisionRequest], exc: Exception) -> None:
        """Resolve every request a failed step touched with the error; the batch starts over."""
        for req in reqs:
            settle(req.future, error_result(exc))
        self._rows, self._batch = [], None
        self.stats["failed_steps"] += 1

    def _abort_all(self, reason: str) -> None:
        with self._lock, self._cv:  # waits out a step still running in the worker
            pending = list(self._waiting) + self._rows
            self._waiting.clear()
            self._rows, self._batch = [], None
        for req in pending:
            settle(req.future, GenerateResult(list(req.out), list(req.lps), "abort", reason))

    # ---------------------------------------------------------------- one request's prefill

    def _prefill_request(self, req: VisionRequest) -> tuple[torch.Tensor, Any, int]:
        """Last-token logits, the request's own cache and the next decode position."""
        grid = _grid(req.mm)
        positions = self._positions(req.ids, grid)
        sess = self._sessions.pop(req.session, None) if req.session else None
        reuse, cache = self._reuse(sess, req.ids)
        logits, cache = self._prefill(req.ids, positions, reuse, cache, req.mm, grid)
        self.stats["prefill_tokens"] += len(req.ids) - reuse
        self.stats["reused_tokens"] += reuse
        return logits, cache, int(positions.max()) + 1

    def _positions(self, ids: list[int], grid: torch.Tensor | None) -> torch.Tensor:
        """[3, 1, L] M-RoPE positions of the prompt, from the model's own rope index."""
        input_ids = torch.tensor([ids], device=self.device)
        n_img = int((input_ids == self.image_token_id).sum())
        if grid is None:
            if n_img:
                raise EngineError(f"prompt has {n_img} image tokens but no images were passed")
            return torch.arange(len(ids), device=self.device).view(1, 1, -1).expand(3, 1, -1)
        expected = int((grid.prod(-1) // self._merge() ** 2).sum())
        if n_img != expected:
            raise EngineError(f"prompt has {n_img} image tokens; the images need {expected}")
        return mrope_positions(self.model, input_ids, grid.to(self.device), self.image_token_id)

    def _merge(self) -> int:
        vision = getattr(self.model.config, "vision_config", None)
        return int(getattr(vision, "spatial_merge_size", 2))

    def _reuse(self, sess: _Session | None, ids: list[int]) -> tuple[int, Any]:
        """How many prompt tokens the session's cache already covers (never splitting an
        image's span: its features are computed whole), and a cache of just those."""
        if sess is None:
            return 0, None
        reuse = min(_common_prefix(sess.ids, ids), len(ids) - 1, sess.kv[0][0].shape[2])
        while reuse > 0 and ids[reuse] == self.image_token_id == ids[reuse - 1]:
            reuse -= 1
        if reuse <= 0:
            return 0, None
        return reuse, self._runner.make_cache(
            [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in sess.kv]
        )

    def _prefill(
        self,
        ids: list[int],
        positions: torch.Tensor,
        reuse: int,
        cache: Any,
        mm: dict[str, Any] | None,
        grid: torch.Tensor | None,
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {}
        if grid is not None and mm is not None:
            first = _images_before(ids, reuse, self.image_token_id, grid, self._merge())
            if first < grid.shape[0]:
                patches = grid.prod(-1)
                start = int(patches[:first].sum())
                kwargs["pixel_values"] = mm["pixel_values"][start:].to(self.device)
                kwargs["image_grid_thw"] = grid[first:].to(self.device)
        suffix = torch.tensor([ids[reuse:]], device=self.device)
        out = self.model(
            input_ids=suffix,
            position_ids=positions[:, :, reuse:],
            use_cache=True,
            **{self._cache_kw: cache},
            **kwargs,
        )
        return out.logits[:, -1], _cache_of(out)

    def _finish(self, prompt: list[int], out: list[int], p: SamplingParams) -> FinishReason | None:
        if out[-1] in self.eos_ids or out[-1] in p.stop_token_ids:
            return "stop"
        if p.stop and self.tokenizer is not None:
            window = max(len(s) for s in p.stop) + 4
            tail = self.tokenizer.decode(out[-window:], skip_special_tokens=False)
            if any(s in tail for s in p.stop):
                return "stop"
        if len(out) >= p.max_new_tokens or len(prompt) + len(out) >= self.max_positions:
            return "length"
        return None

    def _store(self, session_id: str, sess: _Session) -> None:
        self._sessions[session_id] = sess
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)


def mrope_positions(
    model: Any, input_ids: torch.Tensor, grid: torch.Tensor, image_token_id: int
) -> torch.Tensor:
    """[3, B, L] positions from the model's `get_rope_index` (transformers 4.x or 5.x API)."""
    inner = getattr(model, "model", model)
    rope_index = inner.get_rope_index
    if "mm_token_type_ids" in inspect.signature(rope_index).parameters:
        types = (input_ids == image_token_id).int()
        pos, _ = rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=grid)
    else:
        pos, _ = rope_index(input_ids, image_grid_thw=grid)
    return pos


VISION_EXTRA_KEYS = frozenset({"device", "max_sessions", "request_timeout_s"})


def build_vision_engine(cfg: Any, model: Any, tokenizer: Any) -> HFVisionEngine:
    """The hf engine for `model.enable_vision` (an `EngineConfig`): `max_batch_size` bounds the
    decode batch; `extra` may set device, max_sessions and request_timeout_s."""
    extra = dict(cfg.extra or {})
    if unknown := sorted(set(extra) - VISION_EXTRA_KEYS):
        raise EngineError(f"engine.extra {unknown}: the vision engine takes {VISION_EXTRA_KEYS}")
    return HFVisionEngine(model, tokenizer, max_batch_size=cfg.max_batch_size, **extra)


def _grid(mm: dict[str, Any] | None) -> torch.Tensor | None:
    if not mm:
        return None
    if "pixel_values" not in mm or "image_grid_thw" not in mm:
        raise EngineError(f"hf vision engine takes pixel_values + image_grid_thw, got {sorted(mm)}")
    return torch.as_tensor(mm["image_grid_thw"], dtype=torch.long).reshape(-1, 3).cpu()


def _images_before(ids: list[int], end: int, token: int, grid: torch.Tensor, merge: int) -> int:
    """How many images' spans lie entirely in `ids[:end]` (spans are never split)."""
    n_tokens = sum(1 for t in ids[:end] if t == token)
    sizes = (grid.prod(-1) // merge**2).tolist()
    count = 0
    for size in sizes:
        if n_tokens < size:
            break
        n_tokens -= size
        count += 1
    return count


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _eos_ids(model: Any, tok_or_ids: Any) -> frozenset[int]:
    ids: set[int] = set()
    raw = tok_or_ids.eos_token_id if hasattr(tok_or_ids, "decode") else tok_or_ids
    gen_cfg = getattr(model, "generation_config", None)
    for value in (raw, getattr(gen_cfg, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return frozenset(ids)
