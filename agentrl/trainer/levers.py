"""Speed levers of the Actor's update: how the update is computed, never what it computes.

Why: issue #21 asks for a faster GRPO update (MFU) on the GPU. CPU tests check every lever's
values and gradients against the default path; `benchmarks/gpu_update_mfu.py` measures them
on the GPU (BENCHMARKS.md). `agentrl.assembly` turns `traced_attention` and `host_pack` on
for every packed update: the fastest measured update (40% MFU on the H200 0.5B batch, traced
attention 1.08-1.27x faster than the eager branch). The levers are code-level, not config
keys (the eager branch and `compile_scope: decoder`, which measured slower than per-layer
graphs: 152 s compile, 132 ms against 125 ms per update, are kept for comparison):
benchmarks set them on the actor they build, `Actor(..., levers=...)`. `trainer.update_path`
stays a config key: a memory lever users pick (the fused lm-head holds no `[tokens, vocab]`
logits), no faster, so no lever here.
Constructed directly, `UpdateLevers()` is all off (the reference path the tests compare to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrl.config import TrainerConfig


@dataclass(frozen=True)
class UpdateLevers:
    """How the update runs (all off = today's path).

    - `traced_attention`: packed attention that dynamo traces
      (`agentrl.models.packed_attention_op.packed_causal`), so `trainer.compile` keeps each decoder layer
      in one graph (forward and backward), GQA without repeated kv heads, the longest
      segment length rounded up to a power of two. Needs `trainer.packing`.
    - `compile_scope`: what `trainer.compile` compiles: each decoder layer (`layers`,
      today) or the whole decoder stack as one graph (`decoder`: embeddings, every layer
      and the final norm; one graph only with `traced_attention`).
    - `host_pack`: the packed row and its indices are built on the host from the host copy
      of the micro-batch, and every tensor goes to the device from pinned memory without
      waiting: no host sync between the micro-batch's first kernel and its backward.
      Needs `trainer.packing`.
    """

    traced_attention: bool = False
    compile_scope: Literal["layers", "decoder"] = "layers"
    host_pack: bool = False

    def check(self, cfg: TrainerConfig) -> None:
        """One clear error for a lever the trainer config cannot carry."""
        if self.compile_scope not in ("layers", "decoder"):
            raise ValueError(f"UpdateLevers.compile_scope: {self.compile_scope!r} is not one of "
                             "'layers', 'decoder'")  # fmt: skip
        wanted = {"traced_attention": self.traced_attention, "host_pack": self.host_pack}
        for name, on in wanted.items():
            if on and not cfg.packing:
                raise ValueError(f"UpdateLevers.{name} needs trainer.packing=true")
