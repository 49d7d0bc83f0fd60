"""Megatron-core backend (`trainer.backend: megatron`, extra `agentrl[megatron]`).

The policy is loaded as a transformers model (so every role and the rollout engine share one
loader), then `prepare` rebuilds it as a Megatron-core `GPTModel` with the local layer spec
(no Transformer Engine needed) and copies the weights in through `_megatron_convert`. The
returned module is called like an HF causal LM (`input_ids`, `attention_mask`) and returns
logits, so the Actor's losses, log-probs and micro-batching are unchanged; `full_state_dict`
converts back to HF names, which is what the engine's `update_weights` expects.

Parallel sizes come from `AGENTRL_MEGATRON_TP`, `_PP`, `_EP` (default 1) or the constructor.
Run on one H200 with TP=PP=EP=1 (see docs/scaling.md). Written but not run here: TP/EP > 1
(gradient reduction in `clip_grad_norm` over Megatron's data-parallel groups); PP > 1 needs
Megatron's pipeline schedules and is refused by `prepare` (conversion supports it).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from ._megatron_convert import Layout, State, from_hf_config, hf_to_mcore, mcore_to_hf
from ._megatron_shard import Parallel, merge, shard
from .base import TrainingBackend, resolve_device


def _env_int(name: str, given: int | None) -> int:
    return given if given is not None else int(os.environ.get(name, "1"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class McoreCausalLM(torch.nn.Module):
    """A Megatron `GPTModel` behind the HF call signature the trainer uses."""

    def __init__(self, gpt: torch.nn.Module, hf_config: Any, layout: Layout) -> None:
        super().__init__()
        self.gpt, self.config, self.layout = gpt, hf_config, layout

    def forward(
        self, input_ids: torch.Tensor, attention_mask: Any = None, **_: Any
    ) -> torch.Tensor:
        """Logits `[B, L, V]`. Right padding needs only the causal mask (pad positions come
        after every real one and their logits are never read)."""
        b, s = input_ids.shape
        pos = torch.arange(s, device=input_ids.device).expand(b, s)
        causal = torch.ones(s, s, dtype=torch.bool, device=input_ids.device).triu(1)
        logits = self.gpt(input_ids, pos, causal[None, None])
        return logits[..., : self.layout.vocab]


def transformer_config(hf: Any, lay: Layout, par: Parallel, dtype: torch.dtype, cuda: bool) -> Any:
    """Megatron's TransformerConfig for a Qwen2-style HF config; fusions off (no apex/TE)."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe: dict[str, Any] = {}
    if lay.experts:
        moe = dict(
            num_moe_experts=lay.experts,
            moe_router_topk=hf.num_experts_per_tok,
            moe_ffn_hidden_size=hf.moe_intermediate_size,
            # Qwen2-MoE: softmax over all experts, then top-k, renormalized only if asked.
            moe_router_pre_softmax=not getattr(hf, "norm_topk_prob", False),
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_grouped_gemm=False,
            moe_token_dispatcher_type="alltoall" if cuda else "allgather",
        )
        if lay.shared_expert:
            moe |= dict(
                moe_shared_expert_intermediate_size=hf.shared_expert_intermediate_size,
                moe_shared_expert_gate=True,
            )
    return TransformerConfig(
        num_layers=lay.num_layers,
        hidden_size=lay.hidden,
        num_attention_heads=lay.heads,
        num_query_groups=lay.kv_heads,
        kv_channels=lay.head_dim,
        ffn_hidden_size=hf.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=lay.qkv_bias,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=True,
        perform_initialization=False,  # weights are copied in right after
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        tensor_model_parallel_size=par.tp,
        pipeline_model_parallel_size=par.pp,
        expert_model_parallel_size=par.ep,
        **moe,
    )


def _rope_theta(hf: Any) -> float:
    params = getattr(hf, "rope_parameters", None) or {}
    return float(getattr(hf, "rope_theta", None) or params.get("rope_theta", 10000.0))


def build_gpt(hf: Any, lay: Layout, par: Parallel, dtype: torch.dtype, cuda: bool) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if lay.experts:
        _patch_moe_without_te()
    spec = get_gpt_layer_local_spec(num_experts=lay.experts or None, moe_grouped_gemm=False)
    return GPTModel(
        config=transformer_config(hf, lay, par, dtype, cuda),
        transformer_layer_spec=spec,
        vocab_size=lay.padded_vocab,
        max_sequence_length=hf.max_position_embeddings,
        pre_process=par.pp_rank == 0,
        post_process=par.pp_rank == par.pp - 1,
        share_embeddings_and_output_weights=lay.tied,
        position_embedding_type="rope",
        rotary_base=_rope_theta(hf),
        parallel_output=False,  # full-vocab logits on every TP rank (the losses need them)
    )


def _patch_moe_without_te() -> None:
    """megatron-core 0.16 without Transformer Engine leaves `te_general_gemm` undefined (its
    import sits in a try block), and the router's gating GEMM then fails with NameError;
    None selects the plain torch path it already has."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def load_shard(gpt: torch.nn.Module, local: State) -> None:
    """Copy a converted shard in; every parameter must be covered (no silent random init)."""
    own = {k for k in gpt.state_dict() if not k.endswith("_extra_state")}
    missing, unknown = own - set(local), set(local) - own
    if missing or unknown:
        raise ValueError(
            f"megatron load: missing {sorted(missing)[:4]} unknown {sorted(unknown)[:4]}"
        )
    with torch.no_grad():
        state = gpt.state_dict()
        for k, t in local.items():
            state[k].copy_(t)


def local_state(gpt: torch.nn.Module) -> State:
    return {k: v for k, v in gpt.state_dict().items() if not k.endswith("_extra_state")}


class MegatronBackend(TrainingBackend):
    plain_modules = False  # Megatron's own modules (tensor-parallel lm-head)

    def __init__(
        self,
        device: str = "auto",
        *,
        tensor_parallel: int | None = None,
        pipeline_parallel: int | None = None,
        expert_parallel: int | None = None,
        seed: int = 0,
    ) -> None:
        try:
            from megatron.core import parallel_state as ps
        except ImportError as e:  # pragma: no cover - extra not installed
            raise ImportError(
                "trainer.backend=megatron needs megatron-core: pip install 'agentrl[megatron]'"
            ) from e
        self._device = resolve_device(device)
        tp = _env_int("AGENTRL_MEGATRON_TP", tensor_parallel)
        pp = _env_int("AGENTRL_MEGATRON_PP", pipeline_parallel)
        ep = _env_int("AGENTRL_MEGATRON_EP", expert_parallel)
        self._init_process_group()
        if not ps.model_parallel_is_initialized():
            ps.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep)
        self.par = Parallel(
            tp,
            pp,
            ep,
            ps.get_tensor_model_parallel_rank(),
            ps.get_pipeline_model_parallel_rank(),
            ps.get_expert_model_parallel_rank(),
        )
        self.rank, self.world_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self._dp_group = ps.get_data_parallel_group()
        if self._device.type == "cuda":
            from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

            model_parallel_cuda_manual_seed(seed)

    def _init_process_group(self) -> None:
        if dist.is_initialized():
            return
        kind = "nccl" if self._device.type == "cuda" else "gloo"
        if "RANK" in os.environ:  # torchrun
            dist.init_process_group(kind)
            if self._device.type == "cuda":
                local = int(os.environ.get("LOCAL_RANK", 0))
                torch.cuda.set_device(local)
                self._device = torch.device("cuda", local)
            return
        url = f"tcp://127.0.0.1:{_free_port()}"
        dist.init_process_group(kind, init_method=url, rank=0, world_size=1)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def is_main(self) -> bool:
        return dist.get_rank() == 0

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Rebuild `model` (a transformers causal LM) as a Megatron GPTModel, same weights."""
        if self.par.pp > 1:
            raise NotImplementedError(
                "megatron backend: PP > 1 needs pipeline schedules (not implemented)"
            )
        if isinstance(model, McoreCausalLM):
            return model
        lay = from_hf_config(model.config, divisible_by=128 * self.par.tp)
        dtype = next(model.parameters()).dtype
        gpt = build_gpt(model.config, lay, self.par, dtype, self._device.type == "cuda")
        load_shard(gpt, shard(hf_to_mcore(model.state_dict(), lay), lay, self.par))
        wrapped = McoreCausalLM(gpt.to(self._device), model.config, lay)
        for p in wrapped.parameters():
            p.requires_grad_(True)
        return wrapped

    def global_sum(self, value: float) -> float:
        if self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        dist.all_reduce(t, group=self._dp_group)
        return float(t.item())

    def grad_scale(self) -> float:
        return 1.0  # gradients are summed (not averaged) over data-parallel ranks below

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        """Sum gradients over data-parallel ranks, then clip by the global norm (sharded
        parameters counted once per shard, replicated ones once)."""
        from ._megatron_grads import clip_global, reduce_data_parallel

        reduce_data_parallel(model)
        return clip_global(model, max_norm)

    def full_state_dict(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """HF-named full tensors on every rank (collective when model parallel)."""
        assert isinstance(model, McoreCausalLM)
        mine = local_state(model.gpt)
        par = self.par
        if par.tp * par.pp * par.ep == 1:
            full = mine
        else:
            shards: list[Any] = [None] * dist.get_world_size()
            cpu = {k: v.detach().cpu() for k, v in mine.items()}
            dist.all_gather_object(shards, ((par.tp_rank, par.pp_rank, par.ep_rank), cpu))
            full = merge(dict(shards), model.layout, par.tp, par.pp, par.ep)
        yield from mcore_to_hf(full, model.layout).items()

    def load_full_state_dict(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        assert isinstance(model, McoreCausalLM)
        lay = model.layout
        load_shard(model.gpt, shard(hf_to_mcore(state, lay), lay, self.par))

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        from megatron.core import parallel_state as ps

        ps.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()
