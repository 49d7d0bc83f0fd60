"""Env registry: ids like `math/calc-v0` mapped to entry points.

Three ways in, all ending in `register`:
* agentrl's own envs register when `agentrl.envs` is imported;
* installed packages declare an `agentrl.envs` entry point whose target is a callable (or a
  module) that calls `register`; these load lazily on the first lookup;
* a user file passed as `--env-module path.py` is imported by `load_env_module`.

Ids with a family prefix (`textarena:`, `skyrl:`, `openenv:`, `verifiers:`) are not registered:
`agentrl.envs.interop` resolves them on lookup into adapters over those packages' envs.

Every id registered here is also registered in Gymnasium's registry, so once `agentrl.envs` is
imported (or with the `"agentrl.envs:math/calc-v0"` form, which imports it) `gymnasium.make`,
its wrappers (`TimeLimit` via `max_episode_steps=`, `RecordEpisodeStatistics`) and
`gymnasium.make_vec` build agentrl envs like any other. Plugin ids join it when plugins load
(on the first agentrl lookup, or `all_specs()`).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium

_ID_RE = re.compile(r"^[a-z0-9_\-]+(/[A-Za-z0-9_.\-]+)+-v\d+$")


@dataclass
class EnvSpec:
    """How to build one env id."""

    id: str
    entry_point: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    family: str = ""
    description: str = ""

    def load(self) -> Callable[..., Any]:
        if callable(self.entry_point):
            return self.entry_point
        mod, _, attr = self.entry_point.partition(":")
        if not attr:
            raise ValueError(f"env {self.id}: entry point {self.entry_point!r} needs 'module:Attr'")
        return getattr(importlib.import_module(mod), attr)

    def takes_rows(self) -> bool:
        """Whether dataset rows can pose this env's tasks: its class declares `accepts_rows`.
        False for an entry point that is a factory function, or whose module fails to import."""
        from .core import AgentEnv

        try:
            cls = self.load()
        except ImportError:
            return False
        return isinstance(cls, type) and issubclass(cls, AgentEnv) and cls.accepts_rows


registry: dict[str, EnvSpec] = {}
# Entry-point name -> why that plugin failed to load (see `load_plugins`).
plugin_errors: dict[str, str] = {}
_plugins_loaded = False


def register(
    id: str,
    entry_point: str | Callable[..., Any],
    *,
    family: str | None = None,
    description: str = "",
    **kwargs: Any,
) -> EnvSpec:
    """Register an env id. `kwargs` become constructor defaults; `make` may override them.
    An id taken by another env (a built-in one, say) is refused, never replaced silently;
    the same env registered again (its module imported twice) replaces its own entry."""
    if not _ID_RE.match(id):
        raise ValueError(
            f"bad env id {id!r}: expected 'family/name-vN', e.g. 'math/calc-v0' (family: "
            "lowercase letters, digits, '_' or '-'; name: letters, digits, '_', '.' or '-'; "
            "then '-v' with a lowercase v and a version number)"
        )
    if not description and not isinstance(entry_point, str):
        description = (getattr(entry_point, "description", "") or "").strip()
    taken = registry.get(id)
    if taken is not None and not _same_env(taken.entry_point, entry_point):
        raise ValueError(
            f"env id {id!r} is already registered by {_where(taken.entry_point)}; register "
            f"{_where(entry_point)} under another id (`agentrl envs list` shows the ids taken)"
        )
    if taken is not None and taken.kwargs != kwargs:
        raise ValueError(
            f"env id {id!r} is already registered with defaults {taken.kwargs}; register "
            f"the defaults {kwargs} under another id (or pass them to make())"
        )
    spec = EnvSpec(id, entry_point, kwargs, family or id.split("/")[0], description)
    registry[id] = spec
    _register_in_gymnasium(id)
    return spec


def _name(entry_point: str | Callable[..., Any]) -> str:
    """`module:Attr`, as a string entry point spells it."""
    if isinstance(entry_point, str):
        return entry_point
    module = getattr(entry_point, "__module__", None)
    return f"{module}:{getattr(entry_point, '__qualname__', repr(entry_point))}"


def _file(entry_point: str | Callable[..., Any]) -> str | None:
    try:
        return None if isinstance(entry_point, str) else inspect.getsourcefile(entry_point)
    except TypeError:  # a builtin, or a class defined in an interactive session
        return None


def _where(entry_point: str | Callable[..., Any]) -> str:
    """Where an env is defined, for messages: `module:Attr`, and its file when it has one."""
    file = _file(entry_point)
    return _name(entry_point) + (f" ({file})" if file else "")


def _same_env(a: str | Callable[..., Any], b: str | Callable[..., Any]) -> bool:
    """Whether two entry points are one env: the same object or `module:Attr`, or the same
    class defined in the same file (a module imported twice, under two names)."""
    if a is b or _name(a) == _name(b):
        return True
    same_file = _file(a) is not None and _file(a) == _file(b)
    return same_file and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)


def _make_for_gymnasium(id: str, **kwargs: Any) -> Any:
    """Gymnasium's entry point for an agentrl id: module-level, so vector envs can pickle it."""
    return make(id, **kwargs)


def _register_in_gymnasium(id: str) -> None:
    """Mirror `id` into Gymnasium's registry. An id Gymnasium already has from elsewhere is
    left alone; agentrl's own entry is replaced silently when a module registers again."""
    theirs = gymnasium.registry.get(id)
    ours = functools.partial(_make_for_gymnasium, id)
    if theirs is not None:
        creator = theirs.entry_point
        if not (isinstance(creator, functools.partial) and creator.func is _make_for_gymnasium):
            return
        del gymnasium.registry[id]
    gymnasium.register(id, entry_point=ours)


def load_plugins() -> None:
    """Import third-party envs declared under the `agentrl.envs` entry-point group.

    A plugin that raises (on import, or in its setup callable) is recorded in
    `plugin_errors` and warned about once; the other plugins still load. Its ids are then
    unknown, and the unknown-id error and `agentrl envs list` name the failure."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group="agentrl.envs"):
        try:
            target = ep.load()
            if callable(target) and not isinstance(target, type):
                target()
        except Exception as e:  # a broken plugin must not hide the others; name it loudly
            msg = (
                f"agentrl.envs entry point {ep.name!r} ({ep.value}) failed: {type(e).__name__}: {e}"
            )
            plugin_errors[ep.name] = msg
            warnings.warn(msg, RuntimeWarning, stacklevel=2)


def load_env_module(path: str | Path) -> None:
    """Import a user's env file so its `register(...)` calls run."""
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"--env-module: no such file: {path}")
    name = f"agentrl_user_env_{path.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return  # already imported in this process (its register calls ran)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:  # a file that failed to import is not "already imported" next time
        sys.modules.pop(name, None)
        raise


def spec(id: str) -> EnvSpec:
    load_plugins()
    if id not in registry:
        from .interop import resolve  # `textarena:...`, `skyrl:...`: other stacks' envs

        foreign = resolve(id)
        if foreign is not None:
            return foreign
        near = difflib.get_close_matches(id, list(registry), n=3)
        hint = f"did you mean {' or '.join(map(repr, near))}?" if near else "no close match"
        broken = "".join(f"; {m}" for m in plugin_errors.values())
        raise KeyError(
            f"unknown env id {id!r} ({hint}; `agentrl envs list` shows them all, and prefixed "
            f"ids such as `textarena:NAME` wrap other stacks' envs){broken}"
        )
    return registry[id]


def make(id: str, **kwargs: Any) -> Any:
    """Build a registered env. Explicit kwargs override the registered defaults."""
    s = spec(id)
    env = s.load()(**{**s.kwargs, **kwargs})
    env.spec_id = id
    return env


def all_specs() -> list[EnvSpec]:
    load_plugins()
    return [registry[k] for k in sorted(registry)]
