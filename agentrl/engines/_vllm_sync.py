"""How new weights reach a vLLM engine, and what becomes of the requests running then: two
independent facts about the vLLM in use, one choice (`choose`), made once per engine and
named in one log line (`SyncPath.describe`).

- **transfer**: "native" is vLLM's weight transfer in its phases (`init_weight_transfer_engine`
  once; per update `start_weight_update`, `update_weights`, `finish_weight_update`) through
  agentrl's `agentrl_file` backend (`vllm_transfer`). vLLM 0.26.0 (the GPU release pinned to
  torch 2.11) has it, and so does 0.32 (in-process: the engine argument
  `weight_transfer_config` and the factory's run-time registry; a server: the RL routes under
  dev mode, started with agentrl's flags). "rpc" is agentrl's worker extension called through
  `collective_rpc`: the per-release glue the field moved away from, kept for older vLLM.
- **pause**: "keep" leaves the running requests in the engine across the update (their KV
  recomputed under the new weights) and needs vLLM to label each output token with the
  weights that sampled it (`CompletionOutput.weight_versions`, vLLM 0.32; the label is set by
  `finish_weight_update(weight_version)`), or agentrl could not say which weights sampled
  which token. "abort" stops them between two engine steps and continues each as a new
  segment, each token stamped by agentrl (`_versioned`), as exact.

So "keep" needs both facts; 0.32 runs native + keep, 0.26.0 native + abort, older vLLM
rpc + abort. `engine.extra.pause_mode` may ask for "abort" where "keep" is possible, never
for "keep" where it is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrl.engines.base import EngineError

Transfer = Literal["native", "rpc"]
Pause = Literal["keep", "abort"]


@dataclass(frozen=True)
class SyncPath:
    """One engine's weight-sync path (module docstring)."""

    transfer: Transfer
    pause: Pause

    def __post_init__(self) -> None:
        if self.transfer not in ("native", "rpc") or self.pause not in ("keep", "abort"):
            raise EngineError(f"no vLLM weight-sync path {self.transfer}/{self.pause}")
        if self.pause == "keep" and self.transfer != "native":
            raise EngineError("pause mode keep needs vLLM's native weight transfer")

    @property
    def labels(self) -> bool:
        """Whether each token's weight version is vLLM's own label (else agentrl's stamp)."""
        return self.pause == "keep"

    def describe(self) -> str:
        weights = (
            "weights by vLLM's weight transfer (start/update/finish, backend agentrl_file)"
            if self.transfer == "native"
            else "weights through agentrl's worker extension (collective_rpc)"
        )
        pause = (
            "pause mode keep, vLLM labels each token's weights"
            if self.labels
            else "pause mode abort, interrupted requests continue as segments"
        )
        return f"{weights}; {pause}"


def choose(
    *, weight_transfer: bool, token_labels: bool, pause_mode: str | None, where: str
) -> SyncPath:
    """The path for a vLLM (`where`: e.g. "vLLM 0.26.0" or a server's URL) with or without
    the native weight transfer and per-token weight labels; `pause_mode` is the user's
    `engine.extra.pause_mode` (None: "keep" wherever it is possible)."""
    if pause_mode not in (None, "keep", "abort"):
        raise EngineError(f"engine.extra.pause_mode must be 'keep' or 'abort', not {pause_mode!r}")
    can_keep = weight_transfer and token_labels
    if pause_mode == "keep" and not can_keep:
        lacks = "weight transfer" if not weight_transfer else "per-token weight labels"
        raise EngineError(
            f"engine.extra.pause_mode=keep needs vLLM's weight transfer and per-token weight "
            f"labels (vLLM >= 0.32); {where} lacks {lacks}: use pause_mode=abort"
        )
    pause: Pause = "keep" if pause_mode == "keep" or (pause_mode is None and can_keep) else "abort"
    return SyncPath("native" if weight_transfer else "rpc", pause)
