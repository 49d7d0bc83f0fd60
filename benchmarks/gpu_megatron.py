"""Megatron-core backend vs torch backend on one GPU (TP=PP=EP=1), same weights, same batch.

1. logits of the Qwen2.5-0.5B shape (random init, bf16): HF forward vs the converted
   Megatron `GPTModel` (local spec, no Transformer Engine);
2. one GRPO update (ppo_clip, token-mean) of a synthetic multi-turn batch through the real
   `Actor` on each backend: loss, grad norm, and log-probs after the step;
3. `full_state_dict` gives the HF weights back (before the step: bit-exact);
4. a tiny Qwen2-MoE (4 experts, top-2, gated shared expert): logits HF vs Megatron.

    python benchmarks/gpu_megatron.py --json benchmarks/results/gpu_megatron.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_grpo import QWEN05_VOCAB, SHAPES  # noqa: E402

MOE = dict(
    vocab_size=1024, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
    shared_expert_intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
    num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
)  # fmt: skip


def synthetic_batch(rows: int, vocab: int, seed: int = 0) -> Any:
    """Multi-turn trajectories: 3 sampled turns of ~48 tokens with ~16-token observations."""
    from agentrl.trainer.batch import collate
    from agentrl.types import Trajectory, TrajectoryGroup

    rng = random.Random(seed)
    trajs = []
    for _ in range(rows):
        t = Trajectory(prompt_ids=[rng.randrange(3, vocab) for _ in range(rng.randint(48, 80))])
        for k in range(3):
            ids = [rng.randrange(3, vocab) for _ in range(rng.randint(32, 64))]
            t.append(ids, trained=True, logprobs=[-1.0] * len(ids))
            if k < 2:
                t.append([rng.randrange(3, vocab) for _ in range(16)], trained=False)
        t.reward = float(rng.random() > 0.5)
        trajs.append(t)
    return collate([TrajectoryGroup(str(i), trajs[i : i + 8]) for i in range(0, rows, 8)], 0)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def compare_logits(hf: Any, backend: Any, vocab: int) -> dict[str, float]:
    wrapped = backend.prepare(copy.deepcopy(hf))
    ids = torch.randint(3, vocab, (4, 256), device="cuda")
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        got = wrapped(ids)
    top1 = float((ref.argmax(-1) == got.argmax(-1)).float().mean())
    return {
        "rel_err": rel_err(got, ref),
        "max_abs": float((got - ref).abs().max()),
        "top1_agree": top1,
    }


def grpo_update(hf: Any, backend: Any, batch: Any) -> dict[str, Any]:
    """One Actor.update on `backend`; returns metrics, time and post-step log-probs."""
    from agentrl.config import AlgorithmConfig, OptimConfig, TrainerConfig
    from agentrl.trainer.actor import Actor

    trainer = TrainerConfig(
        mini_batch_size=batch.size, micro_batch_size=16, logprob_micro_batch_size=32
    )
    actor = Actor(copy.deepcopy(hf), backend, AlgorithmConfig(), OptimConfig(lr=1e-5), trainer)
    before = actor.compute_log_probs(batch)
    torch.cuda.synchronize()
    t = time.perf_counter()
    metrics = actor.update(batch, torch.Generator().manual_seed(0))
    torch.cuda.synchronize()
    out = {"metrics": metrics, "update_s": time.perf_counter() - t, "logp_before": before}
    out["logp_after"] = actor.compute_log_probs(batch)
    out["weights"] = dict(actor.named_weights())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from agentrl.backends import TorchBackend
    from agentrl.backends.megatron import MegatronBackend

    result: dict[str, Any] = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    torch.manual_seed(0)
    cfg = Qwen2Config(
        **SHAPES["qwen2.5-0.5b"], vocab_size=QWEN05_VOCAB, max_position_embeddings=4096
    )
    with torch.device("cuda"):
        hf = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    mega = MegatronBackend("cuda")
    result["logits_bf16_0.5b"] = compare_logits(hf, mega, QWEN05_VOCAB)
    batch = synthetic_batch(args.rows, 2000)
    batch.advantages = (batch.rewards - 0.5)[:, None] * 2 * batch.response_mask
    ref = grpo_update(hf, TorchBackend("cuda"), _with_old(batch, hf))
    got = grpo_update(hf, mega, _with_old(batch, hf))
    result["grpo_update"] = summarize(ref, got, batch)
    result["grpo_update"]["hf_weights_back_exact_before_step"] = roundtrip_exact(hf, mega)
    result["moe_logits_fp32"] = moe_check(mega, AutoConfig, AutoModelForCausalLM, torch.float32)
    result["moe_logits_bf16"] = moe_check(mega, AutoConfig, AutoModelForCausalLM, torch.bfloat16)
    text = json.dumps(result, indent=1, default=float)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)


def _with_old(batch: Any, hf: Any) -> Any:
    """The batch with old log-probs from the HF model (identical for both runs)."""
    from agentrl.trainer.logprobs import batched_log_probs

    if batch.old_log_probs is None:
        batch.old_log_probs = batched_log_probs(hf, batch.to("cuda"), 32).cpu()
    return batch


def summarize(ref: dict[str, Any], got: dict[str, Any], batch: Any) -> dict[str, Any]:
    mask = batch.response_mask.bool()

    def lp(d: dict[str, Any], k: str) -> torch.Tensor:
        return d[k][mask]

    keys = ("loss", "grad_norm", "entropy", "clip_frac", "ratio_mean")
    return {
        "torch": {k: v for k, v in ref["metrics"].items() if k in keys}
        | {"update_s": ref["update_s"]},
        "megatron": {k: v for k, v in got["metrics"].items() if k in keys}
        | {"update_s": got["update_s"]},
        "logp_before_max_abs": float((lp(ref, "logp_before") - lp(got, "logp_before")).abs().max()),
        "logp_before_mean_abs": float(
            (lp(ref, "logp_before") - lp(got, "logp_before")).abs().mean()
        ),
        "logp_after_mean_abs": float((lp(ref, "logp_after") - lp(got, "logp_after")).abs().mean()),
        "logp_change_torch_mean_abs": float(
            (lp(ref, "logp_after") - lp(ref, "logp_before")).abs().mean()
        ),
        "weights_after_rel_err": rel_err(
            torch.cat([got["weights"][k].flatten().float() for k in sorted(ref["weights"])]),
            torch.cat([ref["weights"][k].flatten().float() for k in sorted(ref["weights"])]),
        ),
        "trained_tokens": int(mask.sum()),
    }


def roundtrip_exact(hf: Any, backend: Any) -> bool:
    wrapped = backend.prepare(copy.deepcopy(hf))
    back = dict(backend.full_state_dict(wrapped))
    return all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


def moe_check(backend: Any, auto_cfg: Any, auto_model: Any, dtype: torch.dtype) -> dict[str, float]:
    torch.manual_seed(0)
    with torch.device("cuda"):
        moe = auto_model.from_config(auto_cfg.for_model("qwen2_moe", **MOE)).to(dtype).eval()
    return compare_logits(moe, backend, MOE["vocab_size"])


if __name__ == "__main__":
    main()
