"""What an env hides from the agent, declared so a red team can look for it where the agent can.

Why: "no sandbox can read the task's tests or answers" is a property of the whole machine
(installed packages, dataset files, the grader's process, its environment), so it is checked
end to end: `agentrl doctor --red-team` runs a search through the env's own code-execution tool
for the current task's hidden data. Only the env knows what that data is; an env with a tool
that runs the agent's code implements `HiddenData`, and the doctor passes the strings to the
search (encoded, so the search's own program never holds them in plain text).

`distinctive` picks the strings: lines of the hidden texts long enough not to occur by chance
and absent from everything the agent is shown (prompt, visible tests, workspace), so finding
one anywhere the agent can read is a leak, not a coincidence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from agentrl.sandboxes.base import TASK_DATA_PACKAGES


class HiddenData(ABC):
    """An env whose current task has data the agent must never read."""

    @abstractmethod
    def hidden_data(self) -> list[str]:
        """Distinctive strings of the current task's hidden tests, reference solution or
        answer (after `reset`); empty when the hidden data is too short to search for."""


def data_packages() -> tuple[str, ...]:
    """Installed packages that hold task data: no sandbox may import or read them."""
    return TASK_DATA_PACKAGES


def distinctive(
    hidden: Iterable[str], visible: Iterable[str], min_chars: int = 24, limit: int = 12
) -> list[str]:
    """Up to `limit` stripped lines of `hidden` with at least `min_chars` characters that occur
    in no `visible` text, longest first (not imports or comments: those recur anywhere)."""
    shown = "\n".join(visible)
    lines = {ln.strip() for text in hidden for ln in text.splitlines()}
    generic = ("import ", "from ", "#")  # imports and comments recur across unrelated files
    keep = [ln for ln in lines if len(ln) >= min_chars and not ln.startswith(generic)]
    keep = [ln for ln in keep if ln not in shown]
    return sorted(keep, key=lambda ln: (-len(ln), ln))[:limit]
