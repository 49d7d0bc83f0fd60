"""HFVisionEngine: generation for Qwen-VL family models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

Why a separate layer: the text `HFEngine` assumes 1D positions (`arange`) for every row.
Qwen2-VL uses 3D M-RoPE: image tokens get (t, h, w) grid positions and the text after an image
continues from `max(previous positions) + 1`, so a sequence's positions are not its indices.
Here each request is prefilled with positions from the model's own `get_rope_index` over the
full prompt (exactly what the trainer's forward computes from `mm_token_type_ids`), and every
decoded token continues at `max(prompt positions) + 1 + k`, the rule `get_rope_index` applies
to trailing text. Logprobs therefore match the trainer's recompute to float tolerance.

It is a layer over `_hf_core.HFCore` (request queue, worker thread, admission, stops,
timeouts, sessions, all-or-nothing weight updates, failures). Each step decodes every request
past prefill together (`_vision_batch`), then prefills each admitted request on its own (its
own images and positions); a request whose prefill raises fails alone. A session keeps its KV
and, when the next turn's prompt extends it, prefills only the new suffix with only the images
whose placeholders lie in that suffix.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from agentrl.engines import _kvbatch as kvb
from agentrl.engines import _vision_batch as vb
from agentrl.engines._hf_core import Request, Session
from agentrl.engines._kv_rows import KVBatchRows
from agentrl.engines.base import EngineError, SamplingParams


class HFVisionEngine(KVBatchRows):
    """Per-request prefill + batched decode over a transformers VLM (CPU or GPU)."""

    calls_transformers_modules = True  # its forward is the model's own
    features: frozenset[str] = frozenset({"admission"})  # `on_admit`, from the core

    # The rollout passes processed pixel inputs (not PIL images) to this engine.
    multimodal_inputs = "processed"

    def __init__(
        self,
        model: Any,
        tokenizer_or_eos_ids: Any,
        *,
        max_batch_size: int = 16,
        max_sessions: int = 256,
        **kwargs: Any,
    ) -> None:
        """`HFCore`'s keyword arguments (a smaller batch and session store by default)."""
        super().__init__(
            model,
            tokenizer_or_eos_ids,
            max_batch_size=max_batch_size,
            max_sessions=max_sessions,
            **kwargs,
        )
        cfg = model.config
        self.image_token_id = int(cfg.image_token_id)
        video = getattr(cfg, "video_token_id", None)
        self._banned = [self.image_token_id] + ([int(video)] if video is not None else [])
        vision = getattr(cfg, "vision_config", None)
        self._merge = int(getattr(vision, "spatial_merge_size", 2))
        self._runner = kvb.ModelRunner(model)
        self._cache_kw = self._runner._cache_kw
        self._batch: kvb.KVBatch | None = None

    def _validate(self, prompt_ids: Sequence[int], params: SamplingParams, multimodal: Any) -> None:
        """The core's checks, then images vs placeholders: the caller gets this EngineError."""
        super()._validate(prompt_ids, params, multimodal)
        grid = _grid(multimodal)
        n_img = sum(1 for t in prompt_ids if int(t) == self.image_token_id)
        if grid is None:
            if n_img:
                raise EngineError(f"prompt has {n_img} image tokens but no images were passed")
            return
        expected = int((grid.prod(-1) // self._merge**2).sum())
        if n_img != expected:
            raise EngineError(f"prompt has {n_img} image tokens; the images need {expected}")

    # ---------------------------------------------------------------- the step

    def _step(self, admitted: list[Request]) -> list[Request]:
        """Decode the running rows together, then prefill each admitted request alone."""
        if self._batch is not None:
            logits = vb.decode(self._runner, self._batch)
            tokens = self._record(self._rows, logits)
            self._batch.next_tokens = torch.tensor(tokens, device=self._batch.mask.device)
            self.stats["decode_steps"] += 1
            self.stats["decode_rows"] += len(self._rows)
        failed = []
        for req in admitted:
            try:
                logits, cache, next_pos = self._prefill_request(req)
                (token,) = self._record([req], logits)
            except Exception as e:  # noqa: BLE001 - reported as this request's error
                self._mark(req, "error", f"{type(e).__name__}: {e}")
                failed.append(req)
                continue
            self._batch = vb.join(self._runner, self._batch, cache, next_pos, token)
            self._rows = self._rows + [req]
        return failed + self._retire()

    def _record(self, rows: list[Request], logits: torch.Tensor) -> list[int]:
        tokens, lps = vb.sample_rows(rows, logits, self._banned)
        for req, tok, lp in zip(rows, tokens, lps, strict=True):
            if req.finish is not None:  # timed out or cancelled: leaves at retire
                continue
            req.output_ids.append(tok)
            req.logprobs.append(lp)
            req.versions.append(self._weight_version)
            req.finish = self._finish_reason(req, tok)
        return tokens

    def _retire(self) -> list[Request]:
        """The shared retire (`_kv_rows`), counting the requests it finished."""
        done = super()._retire()
        self.stats["requests"] += len(done)
        return done

    # ---------------------------------------------------------------- one request's prefill

    def _prefill_request(self, req: Request) -> tuple[torch.Tensor, Any, int]:
        """Last-token logits, the request's own cache and the next decode position."""
        ids, grid = req.prompt_ids, _grid(req.multimodal)
        positions = self._positions(ids, grid)
        sess, reuse = self._take_session(req)
        reuse, cache = self._reuse(sess, reuse, ids)
        logits, cache = self._prefill(ids, positions, reuse, cache, req.multimodal, grid)
        self.stats["prefill_tokens"] += len(ids) - reuse
        self.stats["reused_tokens"] += reuse
        return logits, cache, int(positions.max()) + 1

    def _positions(self, ids: list[int], grid: torch.Tensor | None) -> torch.Tensor:
        """[3, 1, L] M-RoPE positions of the prompt, from the model's own rope index."""
        input_ids = torch.tensor([ids], device=self.device)
        if grid is None:
            return torch.arange(len(ids), device=self.device).view(1, 1, -1).expand(3, 1, -1)
        return mrope_positions(self.model, input_ids, grid.to(self.device), self.image_token_id)

    def _reuse(self, sess: Session | None, reuse: int, ids: list[int]) -> tuple[int, Any]:
        """Never split an image's span (its features are computed whole); a cache of the
        session's first `reuse` tokens."""
        if sess is None:
            return 0, None
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
            first = _images_before(ids, reuse, self.image_token_id, grid, self._merge)
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
