"""agentrl environments: Gymnasium envs over chat messages, registered by id.

    import agentrl
    env = agentrl.make("math/calc-v0")
    obs, info = env.reset(seed=0)

Families register on import of this package; see `registration` for plugins and user files.
"""

import importlib

from .checker import EnvCheckError, check_env
from .core import (
    AgentEnv,
    MessagesSpace,
    Observation,
    ResumableEnv,
    ResumableToolEnv,
    Task,
    ToolEnv,
)
from .hidden_data import HiddenData, data_packages
from .registration import EnvSpec, all_specs, load_env_module, make, register, registry, spec

FAMILIES = ["math", "search", "reasoning", "games", "web", "code", "vision", "swe"]
for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")

__all__ = [
    "AgentEnv",
    "EnvCheckError",
    "EnvSpec",
    "HiddenData",
    "MessagesSpace",
    "Observation",
    "ResumableEnv",
    "ResumableToolEnv",
    "Task",
    "ToolEnv",
    "all_specs",
    "data_packages",
    "check_env",
    "load_env_module",
    "make",
    "register",
    "registry",
    "spec",
]
