"""Name → entry registries for advantage estimators and policy losses.

Config strings (`algorithm.adv_estimator`, `algorithm.policy_loss`) select entries; new
algorithms register themselves with a decorator instead of editing a dispatch `if` chain.
`registrar` builds the policy-loss decorator (estimators have their own, which also records
their traits); `lookup` serves both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def registrar(registry: dict[str, F], kind: str) -> Callable[[str], Callable[[F], F]]:
    """Build a `@register("name")` decorator that refuses duplicate names."""

    def register(name: str) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            if name in registry:
                raise ValueError(f"{kind} {name!r} is already registered")
            registry[name] = fn
            return fn

        return decorate

    return register


def lookup(registry: dict[str, F], name: str, kind: str) -> F:
    """Fetch `name`, or fail listing what exists (a typo in a config should read as one)."""
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry))
        raise KeyError(f"unknown {kind} {name!r}; known: {known}") from None
