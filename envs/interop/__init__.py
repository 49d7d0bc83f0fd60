"""Envs from other ecosystems, used unchanged: an id prefix names the family.

    agentrl train --env harbor:path/to/task-or-dataset      # Harbor task folders
    agentrl envs check ors:my_pkg.envs:MyEnvironment         # an OpenReward Environment class
    agentrl envs check gym:FrozenLake-v1                     # Gymnasium's registry, as chat
    agentrl envs check textarena:GuessTheNumber-v0
    agentrl train --env skyrl:gsm8k data.path=rows.parquet
    agentrl envs check vf:my_pkg.tasks:MyTaskset             # a verifiers Taskset (or vf.Env)
    agentrl envs check openenv:my_pkg.server:MyEnvironment   # an openenv Environment

Why prefixes and not registrations: the foreign registries are large (TextArena has 700 ids,
Gymnasium's grows with every installed package) or open-ended (a folder of task folders, a
class in any module), so an id is resolved when it is asked for, by the adapter of its family,
into an `AgentEnv`. `env_kwargs` reach the adapter (and from it the foreign constructor),
except `python` (and `process_timeout_s`): with `python: PATH` the env runs in a child process
of that interpreter, the way to use a package whose pins clash with agentrl's
(`process_env.py`).

`PREFIXES` is the one table: each row names the adapter, the pip extra that installs what it
needs, the modules it imports (so a missing one is named before anything is imported), what
follows the prefix, and whether it runs in agentrl's process. An unknown prefix or a missing
package is one line naming what to do.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from typing import Any

from ..registration import EnvSpec


@dataclass(frozen=True)
class Prefix:
    """One ecosystem reachable by `name:TARGET` ids."""

    name: str
    entry: str  # the adapter, `module:Class`; built as Class(TARGET, **env_kwargs)
    extra: str  # `pip install 'agentrl[extra]'`; "" when agentrl's own deps suffice
    modules: tuple[str, ...]  # what the adapter imports; checked before it is built
    target: str  # what follows the prefix, for messages
    process: str  # where it runs, and why (docs/envs.md repeats it)


_HERE = "agentrl.envs.interop"
PREFIXES: dict[str, Prefix] = {
    p.name: p
    for p in (
        Prefix(
            "harbor",
            "agentrl.envs.harbor.env:HarborEnv",
            "",
            (),
            "a Harbor task folder, a folder of them, `bundled[/NAME]` or `family/files-v0`",
            "in-process; the task's commands and tests run in sandboxes (local or docker)",
        ),
        Prefix(
            "ors",
            f"{_HERE}.ors_env:ORSEnv",
            "ors",
            ("openreward",),
            "module:EnvironmentClass (an openreward Environment) or a bundled name",
            "in-process (openreward pins sse-starlette==2.3.6; agentrl does not use it)",
        ),
        Prefix(
            "gym",
            "agentrl.envs.games.adapter:GymTextEnv",  # the one Gymnasium-as-chat adapter
            "",
            ("gymnasium",),
            "a Gymnasium id with a Discrete or Text action space (FrozenLake-v1, Taxi-v4, ...)",
            "in-process (gymnasium is an agentrl dependency)",
        ),
        Prefix(
            "textarena",
            f"{_HERE}.textarena_env:TextArenaEnv",
            "textarena",
            ("textarena",),
            "a TextArena id",
            "in-process",
        ),
        Prefix(
            "skyrl",
            f"{_HERE}.skyrl_env:SkyRLGymEnv",
            "skyrl",
            ("skyrl_gym", "omegaconf"),
            "a skyrl-gym env name",
            "in-process",
        ),
        Prefix(
            "openenv",
            f"{_HERE}.openenv_env:OpenEnvEnv",
            "openenv",
            ("openenv",),
            "module:EnvironmentClass, or the http:// URL of a running OpenEnv server",
            "in-process for a class; its own process (a server, e.g. its container) by URL, "
            "the way to keep openenv-core's gradio/fastmcp pins out of agentrl's environment",
        ),
        Prefix(
            "vf",
            f"{_HERE}.verifiers_env:VerifiersEnv",
            "verifiers",
            ("verifiers",),
            "module:TasksetClass or a taskset id verifiers resolves",
            "in-process; verifiers pins mcp==2.0.0 and openai<3, so it gets its own venv "
            "(docs/interop.md)",
        ),
    )
}
ALIASES = {"verifiers": "vf"}  # the prefix's name before `vf:`; both resolve
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_\-]*$")


def missing_modules(prefix: Prefix) -> list[str]:
    """The modules `prefix`'s adapter needs that are not installed here."""
    out = []
    for mod in prefix.modules:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(mod)
    return out


def install_hint(prefix: Prefix) -> str:
    return f"pip install 'agentrl[{prefix.extra}]'" if prefix.extra else "pip install agentrl"


def lookup(name: str) -> Prefix | None:
    return PREFIXES.get(ALIASES.get(name, name))


def resolve(env_id: str) -> EnvSpec | None:
    """The spec of a prefixed id (`family:target`); None if `env_id` has no prefix. An unknown
    prefix raises KeyError naming the known ones."""
    name, sep, target = env_id.partition(":")
    if not sep or not _PREFIX_RE.match(name):
        return None
    prefix = lookup(name)
    if prefix is None:
        known = ", ".join(f"{p}:" for p in [*PREFIXES, *ALIASES])
        raise KeyError(f"env id {env_id!r}: unknown prefix '{name}:'; known prefixes: {known}")
    if not target:
        raise KeyError(f"env id {env_id!r}: give {prefix.target} after '{name}:'")

    def build(**kwargs: Any) -> Any:
        if "python" in kwargs:  # its own venv: the package is imported there, not here
            from .process_env import ProcessEnv

            return ProcessEnv(env_id, **kwargs)
        gone = missing_modules(prefix)
        if gone:
            raise ImportError(
                f"env {env_id!r} needs {', '.join(gone)} (not installed); "
                f"install it with: {install_hint(prefix)}"
            )
        module, _, attr = prefix.entry.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise ImportError(
                f"env {env_id!r}: its {prefix.name} adapter failed to import ({e}); "
                f"install it with: {install_hint(prefix)}"
            ) from e
        return cls(target, **kwargs)

    return EnvSpec(
        env_id, build, {}, family=prefix.name, description=f"{prefix.name} adapter: {target}"
    )


def reachable(prefix: Prefix, limit: int = 6) -> tuple[int | None, list[str]]:
    """How many ids `prefix` reaches here (None: open-ended) and a few examples; ([], 0) when
    its package is missing. Cheap: registries are read, nothing is built."""
    if missing_modules(prefix):
        return 0, []
    ids: list[str] | None = None
    if prefix.name == "harbor":
        from ..harbor.family import FAMILIES
        from ..harbor.tasks import bundled_names

        ids = ["bundled", *(f"bundled/{n}" for n in bundled_names())]
        ids += [f"family/{f}" for f in FAMILIES]
    elif prefix.name == "gym":
        ids = _gym_text_ids()
    elif prefix.name == "ors":
        from .ors_env import BUNDLED

        ids = sorted(BUNDLED)
    elif prefix.name == "textarena":
        import textarena

        ids = sorted(textarena.envs.registration.ENV_REGISTRY)
    elif prefix.name == "skyrl":
        import skyrl_gym

        ids = sorted(skyrl_gym.envs.registration.registry)
    if ids is None:
        return None, []
    return len(ids), [f"{prefix.name}:{i}" for i in ids[:limit]]


def _gym_text_ids() -> list[str]:
    """Gymnasium's own toy-text ids (Discrete actions, an ansi render; they need nothing more).
    Other registered ids with a Discrete or Text action space work too, when their packages
    are installed; telling which would mean building each one."""
    import gymnasium

    return sorted(
        env_id
        for env_id, spec in gymnasium.registry.items()
        if isinstance(spec.entry_point, str)
        and spec.entry_point.startswith("gymnasium.envs.toy_text")
    )
