"""Typed configuration: dataclasses loaded strictly from YAML plus `key=value` overrides."""

from .engine import EngineConfig, FastHFTuning, HFEngineConfig, HFTuning
from .loader import ConfigError, apply_override, dump_yaml, from_dict, load_config, to_dict
from .schema import (
    AlgorithmConfig,
    AsyncConfig,
    DataConfig,
    KLConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    SamplingConfig,
    SFTConfig,
    TrainConfig,
    TrainerConfig,
)

__all__ = [
    "AlgorithmConfig",
    "AsyncConfig",
    "ConfigError",
    "DataConfig",
    "EngineConfig",
    "FastHFTuning",
    "HFEngineConfig",
    "HFTuning",
    "KLConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "SFTConfig",
    "SamplingConfig",
    "TrainConfig",
    "TrainerConfig",
    "apply_override",
    "dump_yaml",
    "from_dict",
    "load_config",
    "to_dict",
]
