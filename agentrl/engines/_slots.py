"""KV-cache slot bookkeeping for the fast hf path: running requests and parked sessions.

Why slots: the static cache has a fixed number of sequences. A running request owns one slot.
When a request with a `session_id` finishes, its slot is *parked* rather than copied out: the
episode's next turn (which extends the same ids after a tool call) takes the slot back and
prefills only its new suffix, with no KV copy at all. Parked slots are evicted LRU whenever a
new request needs a slot and none is free, so parking never blocks admission.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

from agentrl.engines._hf_core import common_prefix


@dataclass
class _Parked:
    slot: int
    ids: list[int]  # prompt + output of the finished request; cache holds ids[:-1]


class SlotPool:
    """Hands out slot indices in [0, n_slots); `max_parked` caps the sessions kept."""

    def __init__(self, n_slots: int, max_parked: int) -> None:
        self.n_slots, self.max_parked = n_slots, max_parked
        self._free = list(range(n_slots - 1, -1, -1))  # pop() gives low slots first
        self._parked: collections.OrderedDict[str, _Parked] = collections.OrderedDict()

    @property
    def parked(self) -> int:
        return len(self._parked)

    @property
    def free(self) -> int:
        return len(self._free)

    def acquire(self, session_id: str | None, prompt: Sequence[int]) -> tuple[int, int]:
        """(slot, reused) for a new request: `reused` leading prompt tokens are already in
        the slot's cache (its session's last turn); the caller prefills the rest."""
        parked = self._parked.pop(session_id, None) if session_id else None
        if parked is not None:
            reuse = common_prefix(parked.ids, prompt)
            # The cache holds ids[:-1], and the prompt's last token must be fed to get logits.
            return parked.slot, max(0, min(reuse, len(prompt) - 1, len(parked.ids) - 1))
        if not self._free:
            if not self._parked:
                raise RuntimeError("no free KV slot (more running requests than slots)")
            _, oldest = self._parked.popitem(last=False)
            return oldest.slot, 0
        return self._free.pop(), 0

    def park(self, session_id: str, slot: int, ids: list[int]) -> None:
        """Keep `slot` for the session's next turn (LRU beyond `max_parked`)."""
        old = self._parked.pop(session_id, None)
        if old is not None:
            self.release(old.slot)
        if self.max_parked <= 0:
            self.release(slot)
            return
        self._parked[session_id] = _Parked(slot, ids)
        while len(self._parked) > self.max_parked:
            _, evicted = self._parked.popitem(last=False)
            self.release(evicted.slot)

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def drop_session(self, session_id: str) -> None:
        parked = self._parked.pop(session_id, None)
        if parked is not None:
            self.release(parked.slot)

    def clear_sessions(self) -> None:
        while self._parked:
            _, parked = self._parked.popitem(last=False)
            self.release(parked.slot)
