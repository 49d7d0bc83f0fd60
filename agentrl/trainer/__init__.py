"""RL trainer: roles (Actor, Reference, Critic, Rollout, RewardScorer) composed by `Trainer`."""

from .actor import Actor
from .batch import TrainBatch, collate
from .build import Components, build_components
from .trainer import Trainer

__all__ = ["Actor", "Components", "TrainBatch", "Trainer", "build_components", "collate"]
