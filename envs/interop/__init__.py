"""Envs from other RL-for-LLM stacks, used unchanged: an id prefix names the family.

    agentrl envs check textarena:GuessTheNumber-v0
    agentrl train --env skyrl:gsm8k data.path=rows.parquet
    agentrl envs check verifiers:my_pkg.tasks:MyTaskset      # a vf.Taskset (or vf.Env)
    agentrl envs check openenv:my_pkg.server:MyEnvironment    # an openenv Environment

Why prefixes and not registrations: the foreign registries are large (TextArena has 700 ids)
or open-ended (a verifiers taskset is any class in any module), so an id is resolved when it is
asked for, by the adapter of its family, into an `AgentEnv`. `env_kwargs` reach the adapter
(and from it the foreign constructor). Each adapter imports its package only when used, and
says which extra installs it when it is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..registration import EnvSpec

# prefix -> (adapter entry point, pip extra, what follows the prefix)
ADAPTERS: dict[str, tuple[str, str, str]] = {
    "textarena": ("agentrl.envs.interop.textarena_env:TextArenaEnv", "textarena", "a TextArena id"),
    "skyrl": ("agentrl.envs.interop.skyrl_env:SkyRLGymEnv", "skyrl", "a skyrl-gym env name"),
    "openenv": (
        "agentrl.envs.interop.openenv_env:OpenEnvEnv",
        "openenv",
        "module:EnvironmentClass",
    ),
    "verifiers": (
        "agentrl.envs.interop.verifiers_env:VerifiersEnv",
        "verifiers",
        "module:TasksetClass or a built-in taskset id",
    ),
}


def resolve(env_id: str) -> EnvSpec | None:
    """The spec of a prefixed id (`family:target`), or None if `env_id` has no known prefix."""
    prefix, sep, target = env_id.partition(":")
    if not sep or prefix not in ADAPTERS:
        return None
    entry, extra, what = ADAPTERS[prefix]
    if not target:
        raise KeyError(f"env id {env_id!r}: give {what} after '{prefix}:'")

    def build(**kwargs: Any) -> Any:
        module, _, attr = entry.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise ImportError(
                f"env {env_id!r} needs the {prefix} package ({e}); "
                f"install it with: pip install 'agentrl[{extra}]'"
            ) from e
        return cls(target, **kwargs)

    return EnvSpec(env_id, build, {}, family=prefix, description=f"{prefix} adapter: {target}")
