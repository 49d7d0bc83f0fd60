"""A static-KV-cache forward for Qwen2/Qwen3/Llama-style decoders, reading the HF modules.

Why our own forward: transformers' decode step is hundreds of small launches with
shape-dependent Python logic (mask building, cache bookkeeping), so at small batch a GPU
waits on the host, and nothing about it is capturable as a CUDA graph. This forward has fixed
shapes for a given (batch bucket, key-length bucket), writes into one pre-allocated cache, and
does no host syncs, so `_cudagraph` can capture it.

It reuses the model's own modules for everything but attention (embedding, RMSNorms, q/k/v/o
projections, MLP, lm_head), so weights are shared, `update_weights` (in-place copies) is
seen at once, and the math is transformers' math; only the attention over the cache is ours.

Cache layout: keys/values are `[layers, slots + 1, kv_heads, max_len, head_dim]`. A slot is
one sequence (a running request or a parked session); the extra last slot is scratch that
padding rows write into. A row's position p is both its RoPE position and its cache column.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from agentrl.engines._compiled import compile_logits, compile_prefill_logits
from agentrl.engines._fast_sampling import STEP, sample_packed

SUPPORTED_TYPES = ("qwen2", "qwen3", "llama")
# Rows of the decode input tensor [9, B] (float64; ids and positions are exact below 2**53).
TOK, POS, SLOT = 0, 1, 2  # then the 6 sampling rows of `_fast_sampling` (inp[3:])
N_OUT = 3 + STEP  # the sampling counter: tokens the row has produced so far
INPUT_ROWS = 9


# Prefill shapes (rows, new tokens, attended length) differ on almost every call. cuDNN's SDPA,
# which torch picks for masked bf16 attention on Hopper, builds an execution plan per new
# shape: on an H200, 0.5B bf16, a fresh-shape prefill took 97 ms (median) that way and 35 ms
# on the memory-efficient kernel (`benchmarks/diagnostics/gpu_prefill_attention.py`).
# The memory-efficient kernel has no per-shape setup. Flash stays allowed: on CUDA it takes no
# mask, so it is never picked here; on CPU it is the fastest masked kernel. (Decode keeps the
# default: its shapes are fixed per captured graph, so a plan is built once.)
PREFILL_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def unsupported_reason(model: Any) -> str | None:
    """Why the static forward cannot run this model, or None if it can."""
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"model_type {kind!r} is not one of {SUPPORTED_TYPES}"
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers") or not hasattr(model, "lm_head"):
        return "unexpected module layout (no .model.layers / .lm_head)"
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        return "sliding-window layers are not supported"
    norm = getattr(base, "norm", None)
    if not isinstance(getattr(norm, "variance_epsilon", None), float):
        return "the final norm is not an RMSNorm with variance_epsilon"
    if (act := getattr(cfg, "hidden_act", "silu")) != "silu":
        return f"hidden_act {act!r} is not silu"
    rope = getattr(base, "rotary_emb", None)
    rope_type = str(getattr(rope, "rope_type", "default"))
    if rope is None or "dynamic" in rope_type or rope_type == "longrope":
        return f"rope type {rope_type!r} depends on sequence length"
    return None


class StaticDecoder:
    """Prefill (eager, ragged) and decode (fixed shape, capturable) over a static KV cache."""

    def __init__(
        self,
        model: Any,
        slots: int,
        max_len: int,
        compile: bool = False,
        compile_prefill: bool = False,
    ) -> None:
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"static decoder: {reason}")
        base = model.model
        self.embed, self.norm, self.lm_head = base.embed_tokens, base.norm, model.lm_head
        self.layers = list(base.layers)
        cfg = model.config
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.n_heads, self.n_kv = int(cfg.num_attention_heads), int(cfg.num_key_value_heads)
        self.group = self.n_heads // self.n_kv
        self.max_len, self.scratch = max_len, slots
        weight = self.embed.weight
        self.device, self.dtype = weight.device, weight.dtype
        # Compiled: one spare column, so a key-length bucket never spans the whole cache dim
        # (dynamo guards on that case, contiguity, and would recompile for the last bucket).
        spare = int(compile or compile_prefill)
        shape = (len(self.layers), slots + 1, self.n_kv, max_len + spare, self.head_dim)
        self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.cos, self.sin = _rope_tables(base.rotary_emb, max_len, self.dtype, self.device)
        self._cols = torch.arange(max_len, device=self.device)  # sliced to a step's key length
        self._layer_ids = torch.arange(len(self.layers), device=self.device)
        self._logits_fn = compile_logits(self._logits) if compile else self._logits
        self.pads_prefill = compile_prefill  # >= 2 x 2 inputs: no size-1 specialisation
        fn = self._prefill_logits
        self._prefill_fn = compile_prefill_logits(fn) if compile_prefill else fn

    def cache_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    # ------------------------------------------------------------------ decode

    def decode(self, inp: torch.Tensor, length: int, mode: int) -> torch.Tensor:
        """One token for each of B rows. `inp` [9, B] float64 on device (TOK, POS, SLOT, then
        the sampling rows); keys attend over cache columns [0, length). Returns [2, B]
        float64: sampled token ids and their logprobs. No host syncs: capturable."""
        logits = self._logits_fn(inp, self._cols[:length])
        return sample_packed(logits, inp[3:], mode)

    def _logits(self, inp: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The model part of `decode`: next-token logits [B, V] attending over key columns
        `cols` (an arange; a tensor, not an int, so a compiled graph can keep it dynamic)."""
        tok, pos, slot = inp[TOK].long(), inp[POS].long(), inp[SLOT].long()
        x = self.embed(tok)[:, None, :]  # [B, 1, hidden]
        cos, sin = self.cos[pos][:, None, None, :], self.sin[pos][:, None, None, :]
        keep = (cols[None, :] <= pos[:, None])[:, None, None, :]  # [B, 1, 1, L]
        for i, layer in enumerate(self.layers):
            h = _rms_norm(layer.input_layernorm, x)
            x = x + self._attend_decode(i, layer.self_attn, h, (cos, sin), slot, pos, keep)
            x = x + _mlp(layer.mlp, _rms_norm(layer.post_attention_layernorm, x))
        return self.lm_head(_rms_norm(self.norm, x))[:, 0, :]

    def decode_step(self, inp: torch.Tensor, length: int, mode: int) -> torch.Tensor:
        """`decode`, then advance `inp` in place to the next step (sampled token in, position
        and sampling counter + 1), so steps can chain on device with no host round trip."""
        out = self.decode(inp, length, mode)
        advance(inp, out)
        return out

    def _attend_decode(
        self,
        i: int,
        attn: Any,
        h: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        slot: torch.Tensor,
        pos: torch.Tensor,
        keep: torch.Tensor,
    ) -> torch.Tensor:
        b, length = h.shape[0], keep.shape[-1]
        q, k, v = self._qkv(attn, h, rope)  # [B, heads, 1, D]
        # Index the whole cache (layer as a tensor index), not the view `self.k[i]`: a
        # compiled graph then writes in place; through the view, inductor copies the layer.
        layer = self._layer_ids[i : i + 1]
        self.k[layer, slot, :, pos] = k[:, :, 0]
        self.v[layer, slot, :, pos] = v[:, :, 0]
        keys, values = self.k[i][slot, :, :length], self.v[i][slot, :, :length]
        # GQA without repeating K/V: each kv head's query group acts as its query "sequence".
        q = q.reshape(b, self.n_kv, self.group, self.head_dim)
        if b == 1 and torch.compiler.is_compiling():
            # Compiled, batch 1: inductor fuses this form with the cache reads (measured faster
            # than SDPA on an H200); at batch 64 it was 2.7x slower, so larger batches use SDPA.
            out = _reduce_attention(q, keys, values, keep, attn.scaling).to(h.dtype)
        else:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=keep, scale=attn.scaling
            )
        return attn.o_proj(out.reshape(b, 1, self.n_heads * self.head_dim))

    # ------------------------------------------------------------------ prefill

    def prefill(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> torch.Tensor:
        """Write each row's new tokens into its slot and return last-token logits [n, V].

        A row is (slot, start, tokens): `tokens` go to cache columns start.. and attend to
        the slot's columns [0, start) already there (a session's reused prefix). The inputs
        are built on the host and sent in two copies; with `compile_prefill` they are padded to
        at least 2 rows x 2 columns (a scratch row, scratch columns), so dynamo never
        specialises a size of 1 and one compiled graph serves every call."""
        inp, per_row, length = self.prefill_inputs(rows)
        inp_d = torch.from_numpy(inp).to(self.device)
        rows_d = torch.from_numpy(per_row).to(self.device)
        with sdpa_kernel(PREFILL_BACKENDS):
            logits = self.prefill_logits(inp_d, rows_d, self.key_columns(length))
        return logits[: len(rows)]

    def prefill_logits(
        self, inp: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """The prefill forward on device inputs (`prefill_inputs`' layout), compiled with
        `compile_prefill`: last-token logits of every input row, padding rows included."""
        return self._prefill_fn(inp, rows, cols)

    def key_columns(self, length: int) -> torch.Tensor:
        """The attended key columns [0, length) as the forwards take them (an arange)."""
        return self._cols[:length]

    def prefill_inputs(
        self,
        rows: Sequence[tuple[int, int, Sequence[int]]],
        shape: tuple[int, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """`prefill`'s host inputs: [4, n, width] (ids, positions, write slot, write position),
        [2, n] (slot, last new-token index) and the attended key length. `shape`: pad to
        these (rows, width) instead (a prefill graph's bucket; at least the rows' own)."""
        n = len(rows)
        slots = np.fromiter((r[0] for r in rows), np.int64, n)
        starts = np.fromiter((r[1] for r in rows), np.int64, n)
        lens = np.fromiter((len(r[2]) for r in rows), np.int64, n)
        width, pad = int(lens.max()), self.pads_prefill
        n_in, w_in = (max(n, 2), max(width, 2)) if pad else (n, width)
        if shape is not None:
            if shape[0] < n or shape[1] < width:
                raise ValueError(f"prefill shape {shape} is smaller than ({n}, {width})")
            n_in, w_in = shape
        # Built in numpy, handed to torch in two calls: each torch call releases and retakes
        # the interpreter lock, and beside a pipelined update's thread (trainer.async) a
        # per-row build of small tensors waited for the lock on every one of them
        # (`benchmarks/diagnostics/host_build.py`).
        # ids, positions, write slot, write position; per row: slot, last index
        inp = np.zeros((4, n_in, w_in), np.int64)
        inp[2] = self.scratch  # padding writes into the scratch slot, never a live sequence
        cols = np.arange(w_in)
        new = cols[None, :] < lens[:, None]  # [n, w_in]: a row's new tokens
        inp[0, :n][new] = np.fromiter(itertools.chain.from_iterable(r[2] for r in rows), np.int64)
        inp[1, :n] = np.minimum(starts[:, None] + cols[None, :], self.max_len - 1)
        inp[2, :n] = np.where(new, slots[:, None], self.scratch)
        inp[3, :n] = np.where(new, inp[1, :n], 0)
        per_row = np.zeros((2, n_in), np.int64)
        per_row[0], per_row[0, :n], per_row[1, :n] = self.scratch, slots, lens - 1
        length = max(int((starts + lens).max()), 2 if pad else 1)
        return inp, per_row, length

    def _prefill_logits(
        self, inp: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """The model part of `prefill`: `inp` [4, n, width] (ids, positions, write slot, write
        position), `rows` [2, n] (slot, last new-token index), `cols` the attended key
        columns (an arange). Host-sync free, so it can be compiled with dynamic sizes."""
        ids, pos = inp[0], inp[1]
        writes = (inp[2], inp[3])
        slots, last = rows[0], rows[1]
        keep = (cols[None, None, :] <= pos[:, :, None])[:, None]  # [n, 1, width, L]
        x = self.embed(ids)
        rope = (self.cos[pos][:, None], self.sin[pos][:, None])  # [n, 1, width, D]
        for i, layer in enumerate(self.layers):
            h = _rms_norm(layer.input_layernorm, x)
            x = x + self._attend_prefill(i, layer.self_attn, h, rope, writes, slots, keep)
            x = x + _mlp(layer.mlp, _rms_norm(layer.post_attention_layernorm, x))
        x = x[torch.arange(x.shape[0], device=x.device), last]
        return self.lm_head(_rms_norm(self.norm, x)).float()

    def _attend_prefill(
        self,
        i: int,
        attn: Any,
        h: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        writes: tuple[torch.Tensor, torch.Tensor],
        slots: torch.Tensor,
        keep: torch.Tensor,
    ) -> torch.Tensor:
        n, width, length = h.shape[0], h.shape[1], keep.shape[-1]
        q, k, v = self._qkv(attn, h, rope)  # [n, heads, width, D]
        # Padding positions write into the scratch slot, never into a live sequence.
        # Index the whole cache (layer as a tensor index): compiled, the write stays in place.
        w_slot, w_pos = writes
        layer = self._layer_ids[i : i + 1]
        self.k[layer, w_slot, :, w_pos] = k.transpose(1, 2)
        self.v[layer, w_slot, :, w_pos] = v.transpose(1, 2)
        keys = self.k[i][slots, :, :length].repeat_interleave(self.group, dim=1)
        values = self.v[i][slots, :, :length].repeat_interleave(self.group, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep, scale=attn.scaling)
        return attn.o_proj(out.transpose(1, 2).reshape(n, width, self.n_heads * self.head_dim))

    # ------------------------------------------------------------------ shared

    def _qkv(
        self, attn: Any, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projections as transformers does them (incl. Qwen3's q/k norms), RoPE applied;
        each returned as [batch, heads, seq, head_dim]."""
        b, s = h.shape[0], h.shape[1]
        q = attn.q_proj(h).view(b, s, -1, self.head_dim)
        k = attn.k_proj(h).view(b, s, -1, self.head_dim)
        v = attn.v_proj(h).view(b, s, -1, self.head_dim).transpose(1, 2)
        if getattr(attn, "q_norm", None) is not None:
            q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
        cos, sin = rope
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def advance(inp: torch.Tensor, out: torch.Tensor) -> None:
    """Turn decode input `inp` [9, B] into the next step's, given that step's output [2, B]."""
    inp[TOK].copy_(out[0])
    inp[POS].add_(1)
    inp[N_OUT].add_(1)


def _reduce_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor, scale: float
) -> torch.Tensor:
    """Decode attention as float32 broadcast-multiply + sums, for inductor: each sum fuses
    with the indexed cache read feeding it, so the slot's keys/values are never copied out.
    q [B, kv, G, D], keys/values [B, kv, L, D], keep [B, 1, 1, L] -> [B, kv, G, D].
    Eager, this would materialise [B, kv, G, L, D]: only for use under torch.compile."""
    scores = (q.float()[:, :, :, None, :] * keys.float()[:, :, None]).sum(-1) * scale
    probs = scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)  # [B, kv, G, L]
    return (probs[..., None] * values.float()[:, :, None]).sum(-2)


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm forward (qwen2/qwen3/llama), computed from the module's weight
    and epsilon. Why not call the module (nor the MLP's activation, nor the attention module,
    nor transformers' rotary function): transformers wraps them in the `kernels` hub layer,
    whose context variable for attention and rotary becomes one process-global flag whenever
    compiled code runs through it, so a compiled update on the trainer's thread
    (`trainer.compile`, `trainer.async.producer: thread`) and an engine thread calling those
    forwards race on it (dynamo's SpeculationLogDivergence, or recompiles on a guard that
    flips). The static forward calls plain `Linear` and `Embedding` modules only."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _mlp(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    """transformers' gated SiLU MLP (qwen2/qwen3/llama) from its projections (see `_rms_norm`)."""
    return mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


def _rope_tables(
    rope: Any, max_len: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for every position, computed as transformers' rotary module does (float32,
    times its attention scaling, then cast), so the static forward rotates identically."""
    inv_freq = rope.inv_freq.to(device=device, dtype=torch.float32)
    positions = torch.arange(max_len, device=device, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = float(getattr(rope, "attention_scaling", 1.0))
    return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)
