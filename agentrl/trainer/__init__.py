"""RL trainer: roles (Actor, Reference, Critic, Rollout, RewardScorer) composed by `Trainer`.

The roles are built by `agentrl.assembly` (`build_trainer(cfg)`); this package defines them,
their Protocols (`components`) and the loop, and imports nothing from the assembly.
"""

from .actor import Actor
from .batch import TrainBatch, collate
from .components import Components
from .trainer import Trainer

__all__ = ["Actor", "Components", "TrainBatch", "Trainer", "collate"]
