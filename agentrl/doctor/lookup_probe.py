"""The `tool-data-lookup` probe: an agent that searches for its task's hidden data with the
code-execution tool the env gives it, then tries to be paid with what it found.

Why: the submission-side `data-lookup` program only sees the grading sandbox. A tool that runs
the agent's code (the code envs' `run_tests`, the `python` interpreter, the SWE env's `bash`)
is another sandbox, often another kind, with full Python and many turns. This probe runs the
`scan.py` search through that tool, resuming where the last call's time budget ran out, for as
many calls as the episode allows, then:

* code envs: submits the lookup program (it answers from any copy of the tests or reference
  solution the grader's sandbox can read too);
* a `bash` + `submit` env: the search has already written every other copy it found of the file
  the bug statement names over the workspace's; it submits;
* answer envs: boxes the first answer found next to the prompt, or says "I don't know.".

Its verdict has two parts: the reward (a hack if paid), and where the search found the current
task's hidden strings (`HiddenData`) or could resolve a data package: any such place is a leak,
a FAIL even if this adversary could not turn it into reward. The search is bounded by each
call's time budget, so its coverage (files read, whether it finished) is part of the finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrl.types import Message, ToolCall

from .programs import entry_points, lookup
from .scan import program, report

if TYPE_CHECKING:
    from .probes import Seen


@dataclass(frozen=True)
class _Exec:
    arg: str  # the tool's code argument
    budget_s: float  # search time per call (under the tool's own limit)
    cap: int  # report characters the tool's output shows
    calls: int  # at most this many searching calls per episode


EXEC = {
    "bash": _Exec("command", 20.0, 4000, 3),
    "python": _Exec("code", 7.0, 3000, 5),
    "run_tests": _Exec("code", 2.0, 380, 5),
}
EXEC_TOOLS = frozenset(EXEC)
_FILE = re.compile(r"in `([\w./-]+\.py)`")


def _clues(prompt: str) -> list[str]:
    """What the adversary searches for: the prompt's distinctive lines."""
    lines = [ln.strip() for ln in prompt.splitlines() if len(ln.strip()) >= 24]
    return sorted(dict.fromkeys(lines), key=len, reverse=True)[:8]


def reports(seen: Seen) -> list[dict[str, Any]]:
    found = (report(m.content) for m in seen.observations if m.role == "tool")
    return [r for r in found if r is not None]


def _search(seen: Seen, name: str, cursor: Any) -> Message:
    ex, eps = EXEC[name], entry_points(seen.prompt)
    hint = _FILE.search(seen.prompt)
    src = program(
        seen.needles,
        seen.packages,
        _clues(seen.prompt),
        entry_points=eps if name == "run_tests" else [],
        hint=hint.group(1) if hint and name == "bash" else "",
        restore=name == "bash",
        budget_s=ex.budget_s,
        cap=ex.cap,
        exit_with_report=name == "run_tests" and not eps,
        cursor=cursor,
    )
    if name == "bash":
        src = f"python3 - <<'RT_EOF'\n{src}\nRT_EOF"
    call = ToolCall(name, {ex.arg: src}, id=f"call_{seen.turn}")
    return Message("assistant", "", tool_calls=[call])


def play(seen: Seen) -> Message:
    name = min(EXEC_TOOLS & seen.tools)  # bash, python, run_tests: the widest first
    done = reports(seen)
    calls = min(EXEC[name].calls, seen.max_turns - 1)
    if seen.turn < calls and (not done or done[-1].get("cursor")):
        return _search(seen, name, done[-1].get("cursor") if done else None)
    if "submit" in seen.tools:
        return Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="call_submit")])
    if seen.family == "code":
        return Message("assistant", f"```python\n{lookup(entry_points(seen.prompt))}```")
    answers = [str(a) for r in done for a in r.get("answers", [])]
    return Message("assistant", f"\\boxed{{{answers[0]}}}" if answers else "I don't know.")


@dataclass
class Inspection:
    """What an episode's searches found: `leaks` (places holding hidden data), `note` (their
    coverage), `searched` (False: no report came back, nothing is proven)."""

    leaks: list[str]
    note: str
    searched: bool


def inspect(seen: Seen) -> Inspection:
    done = reports(seen)
    leaks = list(dict.fromkeys(p for r in done for p in r.get("leaks", [])))
    more = sum(int(r.get("n", 0)) for r in done) - len(leaks)
    if more > 0:
        leaks.append(f"and {more} more place(s)")
    files = sum(int(r.get("files", 0)) for r in done)
    finished = bool(done) and not done[-1].get("cursor")
    restored = [p for r in done for p in r.get("restored", [])]
    note = (
        f"{len(done)} search(es), {files} files read, "
        + ("the whole reachable tree" if finished else "stopped by the tool's time limits")
        + f", {len(seen.needles)} hidden strings looked for"
        + (f"; copied over the workspace: {', '.join(restored)}" if restored else "")
    )
    if not done:
        note = "no search report came back from the tool (its limits, or it failed)"
    return Inspection(leaks, note, bool(done))
