"""HFVisionEngine: generation for Qwen-VL family models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

Why a separate engine: the batching `HFEngine` assumes 1D positions (`arange`) for every row.
Qwen2-VL uses 3D M-RoPE: image tokens get (t, h, w) grid positions and the text after an image
continues from `max(previous positions) + 1`, so a sequence's positions are not its indices.
Here each request is prefilled with positions from the model's own `get_rope_index` over the
full prompt (exactly what the trainer's forward computes from `mm_token_type_ids`), and every
decoded token continues at `max(prompt positions) + 1 + k`, the rule `get_rope_index` applies
to trailing text. Logprobs therefore match the trainer's recompute to float tolerance.

Requests run one at a time in a worker thread (no continuous batching); a session keeps its
KV cache and, when the next turn's prompt extends it, prefills only the new suffix with only
the images whose placeholders lie in that suffix. `update_weights` drops all sessions.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.engines._sampling import make_generator, sample_tokens
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
    cache: Any  # covers ids[:-1] (the last sampled token was never fed back)


class HFVisionEngine(Engine):
    """Per-request prefill + decode over a transformers VLM (CPU or GPU)."""

    # The rollout passes processed pixel inputs (not PIL images) to this engine.
    multimodal_inputs = "processed"

    def __init__(
        self,
        model: Any,
        tokenizer_or_eos_ids: Any,
        *,
        device: str | torch.device | None = None,
        max_sessions: int = 256,
    ) -> None:
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
        self.stats: collections.Counter[str] = collections.Counter()
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._lock = threading.Lock()
        self._sessions: collections.OrderedDict[str, _Session] = collections.OrderedDict()
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
        try:
            return await asyncio.to_thread(self._generate, ids, params, multimodal, session_id)
        except EngineError:
            raise
        except Exception as e:  # noqa: BLE001 - reported as this request's error
            return error_result(e)

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
            self._sessions.clear()

    def release_session(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def sleep(self) -> None:
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
        self._closed = True
        with self._lock:
            self._sessions.clear()

    # ---------------------------------------------------------------- one request

    @torch.inference_mode()
    def _generate(
        self, ids: list[int], p: SamplingParams, mm: dict[str, Any] | None, session: str | None
    ) -> GenerateResult:
        with self._lock:
            grid = _grid(mm)
            positions = self._positions(ids, grid)
            sess = self._sessions.pop(session, None) if session else None
            reuse, cache = self._reuse(sess, ids, grid)
            logits, cache = self._prefill(ids, positions, reuse, cache, mm, grid)
            gen = make_generator(self.device, p.seed)
            next_pos = int(positions.max()) + 1
            out, lps = [], []
            finish: FinishReason | None = None
            while True:
                tok, lp = self._sample(logits, p, gen)
                out.append(tok)
                lps.append(lp)
                finish = self._finish(ids, out, p)
                if finish is not None:
                    break
                logits = self._decode(tok, next_pos, cache)
                next_pos += 1
            if session and finish in ("stop", "length"):
                self._store(session, _Session(ids + out, cache))
            self.stats["requests"] += 1
            self.stats["prefill_tokens"] += len(ids) - reuse
            self.stats["reused_tokens"] += reuse
            return GenerateResult(out, lps, finish)

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

    def _reuse(self, sess: _Session | None, ids: list[int], grid: Any) -> tuple[int, Any]:
        """How many prompt tokens the session's cache already covers (never splitting an
        image's span: its features are computed whole), and that cache cropped to them."""
        if sess is None:
            return 0, None
        reuse = min(_common_prefix(sess.ids, ids), len(ids) - 1, sess.cache.get_seq_length())
        while reuse > 0 and ids[reuse] == self.image_token_id == ids[reuse - 1]:
            reuse -= 1
        if reuse <= 0:
            return 0, None
        extra = sess.cache.get_seq_length() - reuse
        if extra > 0:  # a negative count removes tokens in both transformers 4.x and 5.x
            sess.cache.crop(-extra)
        return reuse, sess.cache

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

    def _decode(self, token: int, pos: int, cache: Any) -> torch.Tensor:
        x = torch.tensor([[token]], device=self.device)
        position_ids = torch.full((3, 1, 1), pos, dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=x, position_ids=position_ids, use_cache=True, **{self._cache_kw: cache}
        )
        return out.logits[:, -1]

    def _sample(
        self, logits: torch.Tensor, p: SamplingParams, gen: torch.Generator
    ) -> tuple[int, float]:
        """Sample with image/video placeholders filtered out: a sampled placeholder would have
        no pixels behind it and break every later forward. Like top-k, the filter only shapes
        sampling; the logprob is of the unfiltered tempered distribution, as the trainer
        recomputes it."""
        dev = logits.device
        allowed = logits.float().clone()
        allowed[:, self._banned] = float("-inf")
        tokens, _ = sample_tokens(
            allowed,
            torch.tensor([p.temperature], device=dev),
            torch.tensor([p.top_k], dtype=torch.long, device=dev),
            torch.tensor([p.top_p], device=dev),
            [gen],
        )
        tok = int(tokens[0])
        scale = p.temperature if p.temperature > 0 else 1.0
        return tok, float(torch.log_softmax(logits.float() / scale, dim=-1)[0, tok])

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


def build_vision_engine(cfg: Any, model: Any, tokenizer: Any) -> HFVisionEngine:
    """The hf engine for `model.enable_vision` (an `EngineConfig`; batching keys are ignored)."""
    extra = {k: v for k, v in (cfg.extra or {}).items() if k in ("device", "max_sessions")}
    return HFVisionEngine(model, tokenizer, **extra)


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
