"""Loss metrics that can stay on the device until an update ends.

Why: reading a statistic (`.item()`) waits for every kernel queued before it. A loss that
reads its half-dozen metrics between the forward and the backward makes the host wait for
the forward, then start queueing the backward from an idle device, in every micro-batch.
Inside `deferred_metrics()` (every `Actor.update`) `metric`
returns the detached 0-d tensor instead; the Actor sums them on the device and reads them
all at once at the end of the update. Outside it, `metric` is `.item()`: every other caller
gets floats as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from torch import Tensor

_DEFER: ContextVar[bool] = ContextVar("agentrl_deferred_metrics", default=False)


def metric(x: Tensor) -> float | Tensor:
    """A scalar statistic for a metrics dict: a float, or inside `deferred_metrics()` the
    detached 0-d tensor on its device (no host sync)."""
    return x.detach() if _DEFER.get() else x.item()


@contextmanager
def deferred_metrics(on: bool = True) -> Iterator[None]:
    """Within the block (when `on`), `metric` leaves statistics on the device."""
    token = _DEFER.set(on)
    try:
        yield
    finally:
        _DEFER.reset(token)
