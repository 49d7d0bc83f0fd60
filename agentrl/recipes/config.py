"""Config of the self-play recipes: a full `TrainConfig` (model, engine, sampling, rollout,
data, optim, trainer) plus the `selfplay:` section below. Kept out of `TrainConfig` because
RL runs never read it; `load_config(SelfPlayTrainConfig, path)` validates it as strictly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentrl.config import TrainConfig


@dataclass(kw_only=True)
class SelfPlayConfig:
    # spin: env-oracle demonstrations ("real") vs the previous iterate's samples ("generated").
    # sppo: rollout.n samples per prompt, win probabilities from env rewards.
    method: Literal["spin", "sppo"] = "spin"
    # Outer iterations; each one samples with the previous iterate, then trains against it.
    iterations: int = 2
    # Prompts (env seeds or dataset rows) drawn per iteration.
    prompts_per_iteration: int = 16
    # Passes over one iteration's pairs (SPIN) or responses (SPPO).
    epochs: int = 2
    # Pairs (SPIN) or responses (SPPO) per optimizer step; split by trainer.micro_batch_size.
    batch_size: int = 8
    # SPIN: β of the logistic loss on the log-ratio margin.
    beta: float = 0.1
    # SPPO: η, the log-ratio target is η·(P(win) − ½).
    eta: float = 1.0


@dataclass(kw_only=True)
class SelfPlayTrainConfig(TrainConfig):
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
