"""HF ↔ Megatron-core weight conversion for Qwen2-style decoders (dense and MoE). Pure torch.

Why a module of its own: the mapping is the part that silently breaks a Megatron run (a
wrong head order still trains, just badly), so it is kept free of Megatron imports and tested
on CPU by round trips. Names follow Megatron-core's `GPTModel` with the local (no
Transformer Engine) layer spec:

- q/k/v projections are packed *per query group*: for each kv head g, the rows of its
  `heads // kv_heads` query heads, then its key head, then its value head (biases alike);
- the gated MLP's gate and up projections are one `linear_fc1` (gate rows first);
- tied embeddings: no `output_layer.weight` (Megatron reuses the embedding) unless the model
  is cut into pipeline stages, where the last stage keeps its own copy;
- MoE (Qwen2-MoE): `mlp.router`, `mlp.experts.local_experts.{e}`, `mlp.shared_experts` with
  its sigmoid gate. transformers 5 stores experts fused (`experts.gate_up_proj [E, 2I, H]`,
  `experts.down_proj [E, H, I]`), which is Megatron's per-expert fc1/fc2 layout already.

Parallel layout (`shard` / `merge`): TP splits column-parallel weights (qkv by query group,
fc1 by gate and up halves, vocab rows) and row-parallel ones (`linear_proj`, `linear_fc2`)
on the input dim; PP gives stage p layers [p·L/P, (p+1)·L/P) renumbered from 0; EP gives
rank r experts [r·E/EP, (r+1)·E/EP) renumbered from 0. Experts use the same TP size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

State = dict[str, torch.Tensor]
_ATTN = "self_attention."


@dataclass(frozen=True)
class Layout:
    """The shape facts the mapping needs, read from an HF config (`from_hf_config`)."""

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    padded_vocab: int
    tied: bool
    qkv_bias: bool = True
    experts: int = 0  # 0 = dense MLP
    shared_expert: bool = False

    @property
    def group_rows(self) -> int:
        """Rows of one query group in the packed qkv: its q heads, one k head, one v head."""
        return (self.heads // self.kv_heads + 2) * self.head_dim


def from_hf_config(cfg: Any, divisible_by: int = 128) -> Layout:
    """Layout of a transformers Qwen2/Qwen2-MoE/Llama-style config; vocab padded to a
    multiple of `divisible_by` (Megatron pads the embedding so TP can split it evenly)."""
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    vocab = cfg.vocab_size
    padded = -(-vocab // divisible_by) * divisible_by
    experts = int(getattr(cfg, "num_experts", 0) or getattr(cfg, "num_local_experts", 0) or 0)
    qkv_bias = getattr(cfg, "model_type", "") in ("qwen2", "qwen2_moe") or bool(
        getattr(cfg, "attention_bias", False)
    )
    return Layout(
        num_layers=cfg.num_hidden_layers,
        hidden=cfg.hidden_size,
        heads=heads,
        kv_heads=cfg.num_key_value_heads or heads,
        head_dim=head_dim,
        vocab=vocab,
        padded_vocab=padded,
        tied=bool(getattr(cfg, "tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        experts=experts,
        shared_expert=bool(getattr(cfg, "shared_expert_intermediate_size", 0)),
    )


# ---------------------------------------------------------------------------- qkv packing
def pack_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lay: Layout) -> torch.Tensor:
    """[q; k; v] rows (HF) → per-group [q_g; k_g; v_g] rows (Megatron); weights or biases."""
    g, per, d = lay.kv_heads, lay.heads // lay.kv_heads, lay.head_dim
    tail = q.shape[1:]
    qg = q.reshape(g, per * d, *tail)
    kg = k.reshape(g, d, *tail)
    vg = v.reshape(g, d, *tail)
    return torch.cat([qg, kg, vg], dim=1).reshape(g * lay.group_rows, *tail)


def unpack_qkv(qkv: torch.Tensor, lay: Layout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g, per, d = lay.kv_heads, lay.heads // lay.kv_heads, lay.head_dim
    tail = qkv.shape[1:]
    grouped = qkv.reshape(g, lay.group_rows, *tail)
    q, k, v = torch.split(grouped, [per * d, d, d], dim=1)
    return (
        q.reshape(g * per * d, *tail),
        k.reshape(g * d, *tail),
        v.reshape(g * d, *tail),
    )


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t
    return torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])])


# ---------------------------------------------------------------------------- HF → Megatron
def hf_to_mcore(hf: State, lay: Layout) -> State:
    """Full (unsharded) Megatron state dict from an HF causal-LM state dict."""
    out: State = {
        "embedding.word_embeddings.weight": _pad_rows(
            hf["model.embed_tokens.weight"], lay.padded_vocab
        )
    }
    for i in range(lay.num_layers):
        out |= _layer_to_mcore(hf, f"model.layers.{i}.", f"decoder.layers.{i}.", lay)
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if not lay.tied:
        out["output_layer.weight"] = _pad_rows(hf["lm_head.weight"], lay.padded_vocab)
    return out


def _layer_to_mcore(hf: State, src: str, dst: str, lay: Layout) -> State:
    a = src + "self_attn."
    out = {
        dst + "input_layernorm.weight": hf[src + "input_layernorm.weight"],
        dst + "pre_mlp_layernorm.weight": hf[src + "post_attention_layernorm.weight"],
        dst + _ATTN + "linear_proj.weight": hf[a + "o_proj.weight"],
        dst + _ATTN + "linear_qkv.weight": pack_qkv(
            hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"], lay
        ),
    }
    if lay.qkv_bias:
        out[dst + _ATTN + "linear_qkv.bias"] = pack_qkv(
            hf[a + "q_proj.bias"], hf[a + "k_proj.bias"], hf[a + "v_proj.bias"], lay
        )
    m = src + "mlp."
    if not lay.experts:
        return out | _mlp_to_mcore(hf, m, dst + "mlp.")
    out[dst + "mlp.router.weight"] = hf[m + "gate.weight"]
    for e, (fc1, fc2) in enumerate(_hf_experts(hf, m, lay.experts)):
        out[dst + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = fc1
        out[dst + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = fc2
    if lay.shared_expert:
        out |= _mlp_to_mcore(hf, m + "shared_expert.", dst + "mlp.shared_experts.")
        out[dst + "mlp.shared_experts.gate_weight"] = hf[m + "shared_expert_gate.weight"]
    return out


def _mlp_to_mcore(hf: State, src: str, dst: str) -> State:
    gate_up = torch.cat([hf[src + "gate_proj.weight"], hf[src + "up_proj.weight"]])
    return {
        dst + "linear_fc1.weight": gate_up,
        dst + "linear_fc2.weight": hf[src + "down_proj.weight"],
    }


def _hf_experts(hf: State, m: str, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-expert (fc1 = [gate; up], fc2 = down) from fused (transformers 5) or per-expert
    (transformers 4) HF names."""
    if m + "experts.gate_up_proj" in hf:
        gu, down = hf[m + "experts.gate_up_proj"], hf[m + "experts.down_proj"]
        return [(gu[e], down[e]) for e in range(n)]
    return [
        (
            torch.cat(
                [hf[f"{m}experts.{e}.gate_proj.weight"], hf[f"{m}experts.{e}.up_proj.weight"]]
            ),
            hf[f"{m}experts.{e}.down_proj.weight"],
        )
        for e in range(n)
    ]


# ---------------------------------------------------------------------------- Megatron → HF
def mcore_to_hf(mc: State, lay: Layout, fused_experts: bool = True) -> State:
    """HF state dict from a full Megatron one (inverse of `hf_to_mcore`)."""
    emb = mc["embedding.word_embeddings.weight"][: lay.vocab]
    out: State = {"model.embed_tokens.weight": emb}
    for i in range(lay.num_layers):
        out |= _layer_to_hf(mc, f"decoder.layers.{i}.", f"model.layers.{i}.", lay, fused_experts)
    out["model.norm.weight"] = mc["decoder.final_layernorm.weight"]
    head = mc.get("output_layer.weight")
    out["lm_head.weight"] = emb if lay.tied or head is None else head[: lay.vocab]
    return out


def _layer_to_hf(mc: State, src: str, dst: str, lay: Layout, fused: bool) -> State:
    a = dst + "self_attn."
    q, k, v = unpack_qkv(mc[src + _ATTN + "linear_qkv.weight"], lay)
    out = {
        dst + "input_layernorm.weight": mc[src + "input_layernorm.weight"],
        dst + "post_attention_layernorm.weight": mc[src + "pre_mlp_layernorm.weight"],
        a + "o_proj.weight": mc[src + _ATTN + "linear_proj.weight"],
        a + "q_proj.weight": q,
        a + "k_proj.weight": k,
        a + "v_proj.weight": v,
    }
    if lay.qkv_bias:
        qb, kb, vb = unpack_qkv(mc[src + _ATTN + "linear_qkv.bias"], lay)
        out |= {a + "q_proj.bias": qb, a + "k_proj.bias": kb, a + "v_proj.bias": vb}
    m = dst + "mlp."
    if not lay.experts:
        return out | _mlp_to_hf(mc, src + "mlp.", m)
    out[m + "gate.weight"] = mc[src + "mlp.router.weight"]
    pre = src + "mlp.experts.local_experts."
    fc1 = [mc[f"{pre}{e}.linear_fc1.weight"] for e in range(lay.experts)]
    fc2 = [mc[f"{pre}{e}.linear_fc2.weight"] for e in range(lay.experts)]
    if fused:
        out[m + "experts.gate_up_proj"] = torch.stack(fc1)
        out[m + "experts.down_proj"] = torch.stack(fc2)
    else:
        for e, (w1, w2) in enumerate(zip(fc1, fc2, strict=True)):
            gate, up = w1.chunk(2)
            out |= {f"{m}experts.{e}.gate_proj.weight": gate, f"{m}experts.{e}.up_proj.weight": up}
            out[f"{m}experts.{e}.down_proj.weight"] = w2
    if lay.shared_expert:
        out |= _mlp_to_hf(mc, src + "mlp.shared_experts.", m + "shared_expert.")
        out[m + "shared_expert_gate.weight"] = mc[src + "mlp.shared_experts.gate_weight"]
    return out


def _mlp_to_hf(mc: State, src: str, dst: str) -> State:
    gate, up = mc[src + "linear_fc1.weight"].chunk(2)
    return {
        dst + "gate_proj.weight": gate,
        dst + "up_proj.weight": up,
        dst + "down_proj.weight": mc[src + "linear_fc2.weight"],
    }
