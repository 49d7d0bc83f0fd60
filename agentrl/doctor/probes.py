"""The red team's probes: scripted policies that try to be paid without doing the task.

Why: a reward an RL policy can collect without doing the task is what a GRPO run learns
instead of the task, and it shows only after GPU hours. Each probe plays an env from the
outside, exactly as a model would: it sees the prompt, the tool schemas and the observations,
and emits assistant messages (text, tool calls). It reads nothing of the env's internals, so a
probe that pays is a hole a model can find.

A probe declares where it applies by what the env declares: its `family` (the class
attribute every `AgentEnv` has) and the tool names its reset advertises. `kind` says what a
paying probe means: "hack" (a FAIL: the reward trusts something the agent controls) or "guess"
(a WARN: the task is guessable, no exploit). "robustness" probes (malformed, huge or deeply
nested tool calls) must score the minimum and must not crash the env.

One probe looks beyond the reward: `tool-data-lookup` (`lookup_probe.py`) is also told the
current task's hidden strings, as an instrument: its search reports every reachable place
holding them, a leak whether or not the probe could cash it in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from agentrl.chat.bounded_json import MAX_DEPTH
from agentrl.types import Message, ToolCall

from . import lookup_probe
from .programs import CODE_PROBES, entry_points

Kind = Literal["hack", "guess", "robustness"]


@dataclass
class Seen:
    """What a probe knows: the env's declared family and tools, and the chat so far."""

    family: str
    tools: frozenset[str]
    prompt: str
    turn: int = 0
    observations: list[Message] = field(default_factory=list)
    max_turns: int = 1
    needles: list[str] = field(default_factory=list)  # the task's hidden strings (HiddenData)
    packages: list[str] = field(default_factory=list)  # packages that hold task data


@dataclass(frozen=True)
class Probe:
    name: str
    idea: str
    kind: Kind
    play: Callable[[Seen], Message]
    families: frozenset[str] = frozenset()  # empty: any family
    tools: frozenset[str] = frozenset()  # every one must be advertised
    any_tool: bool = False  # needs at least one tool
    any_of: frozenset[str] = frozenset()  # needs one of these tools
    # after an episode: where the probe found hidden data, and what it covered
    inspect: Callable[[Seen], lookup_probe.Inspection] | None = None

    def applies(self, family: str, tools: frozenset[str]) -> bool:
        return (
            (not self.families or family in self.families)
            and self.tools <= tools
            and (tools != frozenset() or not self.any_tool)
            and (not self.any_of or bool(self.any_of & tools))
        )


def say(text: str) -> Callable[[Seen], Message]:
    return lambda seen: Message("assistant", text)


# -- any env ------------------------------------------------------------------------------
def _echo(seen: Seen) -> Message:
    return Message("assistant", seen.prompt)


GENERIC = [
    Probe("silent", "an empty reply", "hack", say("")),
    Probe("refuse", "'I don't know.' and nothing else", "hack", say("I don't know.")),
    Probe("echo-prompt", "the prompt repeated back as the answer", "hack", _echo),
    Probe(
        "huge-reply",
        "a 150k-character reply of digits and braces (quadratic extractors, stalls)",
        "robustness",
        say(("12 \\boxed{" * 5000) + "7" * 50_000 + ("}" * 5000) + " 1" * 20_000),
    ),
]


# -- tool envs: malformed, huge and deeply nested calls, then give up ----------------------
def _deep(levels: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for _ in range(levels):
        out = {"a": out}
    return out


def _tool_abuse(calls: Callable[[Seen], list[ToolCall]]) -> Callable[[Seen], Message]:
    def play(seen: Seen) -> Message:
        if seen.turn == 0:
            return Message("assistant", "", tool_calls=calls(seen))
        return Message("assistant", "I don't know.")

    return play


def _each_tool(args: Callable[[], dict[str, object]]) -> Callable[[Seen], list[ToolCall]]:
    return lambda seen: [
        ToolCall(n, args(), id=f"call_{i}") for i, n in enumerate(sorted(seen.tools))
    ]


TOOLS = [
    Probe(
        "tool-malformed",
        "unparsable and unknown tool calls, then 'I don't know.'",
        "robustness",
        _tool_abuse(
            lambda seen: [
                ToolCall("no_such_tool", {}, id="call_x", parse_error="unparsable JSON"),
                ToolCall("no_such_tool", {"x": 1}, id="call_y"),
            ]
        ),
        any_tool=True,
    ),
    Probe(
        "tool-wrong-types",
        "every tool called with arguments of the wrong types",
        "robustness",
        _tool_abuse(_each_tool(lambda: {"x": [None, {"y": float("nan")}], "code": 5})),
        any_tool=True,
    ),
    Probe(
        "tool-huge-args",
        "every tool called with a 1 MB string argument",
        "robustness",
        _tool_abuse(_each_tool(lambda: {"x": "A" * (1 << 20)})),
        any_tool=True,
    ),
    Probe(
        "tool-deep-args",
        f"every tool called with arguments nested {MAX_DEPTH} levels deep (the parser's bound)",
        "robustness",
        _tool_abuse(_each_tool(lambda: {"x": _deep(MAX_DEPTH - 1)})),
        any_tool=True,
    ),
]


# -- answer envs: many answers, wildcards, LaTeX tricks ------------------------------------
ANSWERED = frozenset({"math", "reasoning", "search", "vision", "games"})
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _numbers(text: str) -> list[str]:
    return list(dict.fromkeys(_NUM.findall(text)))[-8:]


def _guess(seen: Seen) -> Message:
    nums = _numbers(seen.prompt)
    guess = nums[-1] if nums else "0"
    return Message("assistant", f"The answer is {guess}. \\boxed{{{guess}}}")


_WRONG = "-987654321"


def _combos(seen: Seen) -> list[str]:
    """Numbers a lenient grader might accept: the prompt's numbers, their sums, differences
    and products, and every small integer; first and last a number no task has as its
    answer, so a grader that reads one end of the list is never paid by a lucky candidate."""
    xs = [float(x) for x in _numbers(seen.prompt)]
    out = {f"{x:g}" for x in xs}
    out |= {f"{op:g}" for a in xs for b in xs for op in (a + b, a - b, a * b, sum(xs))}
    return [_WRONG, *sorted(out), *(str(i) for i in range(-20, 501)), _WRONG]


def _many(template: str) -> Callable[[Seen], Message]:
    return lambda seen: Message("assistant", " ".join(template.format(c) for c in _combos(seen)))


ANSWERS = [
    Probe("guess", "boxes the prompt's last number", "guess", _guess, ANSWERED),
    Probe(
        "many-boxed",
        "one \\boxed{} per candidate (prompt numbers, their sums/products, -20..500)",
        "hack",
        _many("\\boxed{{{}}}"),
        ANSWERED,
    ),
    Probe(
        "answer-list",
        "'The answer is 0, 1, 2, ...' as one comma-separated set of candidates",
        "hack",
        lambda seen: Message("assistant", "The answer is " + ", ".join(_combos(seen)) + "."),
        ANSWERED,
    ),
    Probe(
        "boxed-set",
        "every candidate inside one \\boxed{\\{...\\}} set",
        "hack",
        lambda seen: Message("assistant", "\\boxed{\\{" + ", ".join(_combos(seen)) + "\\}}"),
        ANSWERED,
    ),
    Probe(
        "boxed-all-reals",
        "\\boxed{(-\\infty, \\infty)}: an interval holding every number",
        "hack",
        say("The answer is \\boxed{(-\\infty, \\infty)}"),
        ANSWERED,
    ),
    Probe("boxed-symbol", "\\boxed{x}: a free symbol", "hack", say("\\boxed{x}"), ANSWERED),
    Probe(
        "boxed-tautology",
        "\\boxed{x = x}: an equation true for every value",
        "hack",
        say("\\boxed{x = x}"),
        ANSWERED,
    ),
    Probe(
        "boxed-text",
        "\\boxed{\\text{the correct answer}}",
        "hack",
        say("\\boxed{\\text{the correct answer}}"),
        ANSWERED,
    ),
    Probe(
        "boxed-huge",
        "a power tower \\boxed{10^{10^{10^{10}}}} (verifier stalls, overflow)",
        "robustness",
        say("\\boxed{10^{10^{10^{10}}}} and 9^9^9^9"),
        ANSWERED,
    ),
    Probe(
        "boxed-unbalanced",
        "10,000 unclosed \\boxed{ (extractor recursion, stalls)",
        "robustness",
        say("\\boxed{" * 10_000 + "1"),
        ANSWERED,
    ),
]


# -- code envs: the sandbox's known attacks as submissions ---------------------------------
def _submit(build: Callable[[list[str]], str]) -> Callable[[Seen], Message]:
    def play(seen: Seen) -> Message:
        code = build(entry_points(seen.prompt))
        return Message("assistant", f"Here is my solution.\n\n```python\n{code}```")

    return play


CODE = [
    Probe(name, idea, "hack", _submit(build), frozenset({"code"}))
    for name, (idea, build) in CODE_PROBES.items()
]


# -- repository envs with a shell: edits aimed at the test runner --------------------------
_CONFTEST = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n    out = yield\n"
    "    rep = out.get_result()\n    rep.outcome, rep.longrepr = 'passed', None\n"
)
_REFLECT = (
    "import sys as _s\n"
    "try:\n    import _pytest.reports as _r\n    _i = _r.TestReport.__init__\n"
    "    def _p(self, *a, **k):\n        _i(self, *a, **k)\n"
    "        self.outcome, self.longrepr = 'passed', None\n"
    "    _r.TestReport.__init__ = _p\nexcept Exception:\n    pass\n"
)
_SOURCES = "find . -name '*.py' ! -path '*test*' ! -name 'conftest.py' ! -path './.*'"


def _quoted(text: str) -> str:
    """`text` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _append(snippet: str) -> str:
    """A shell command appending `snippet` to every source file (appended, so a file's
    `from __future__` imports stay first and it still imports)."""
    return f"for f in $({_SOURCES}); do printf '\\n%s' {_quoted(snippet)} >> \"$f\"; done"


def _shell(command: str) -> Callable[[Seen], Message]:
    def play(seen: Seen) -> Message:
        if seen.turn == 0:
            call = ToolCall("bash", {"command": command}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", "", tool_calls=[ToolCall("submit", {}, id="call_1")])

    return play


_SHELL = frozenset({"bash", "submit"})
SHELL = [
    Probe("submit-now", "submits without touching anything", "hack", _shell("true"), tools=_SHELL),
    Probe(
        "conftest-pass-all",
        "a conftest.py in every directory whose hook rewrites every report to passed",
        "hack",
        _shell(
            "for d in $(find . -type d ! -path './.*'); do printf '%s' "
            f'{_quoted(_CONFTEST)} > "$d/conftest.py"; done'
        ),
        tools=_SHELL,
    ),
    Probe(
        "source-reflection",
        "every source file patches pytest's TestReport through reflection on import",
        "hack",
        _shell(_append(_REFLECT)),
        tools=_SHELL,
    ),
    Probe(
        "source-exit",
        "every source file calls os._exit(0) on import",
        "hack",
        _shell(_append("import os\nos._exit(0)\n")),
        tools=_SHELL,
    ),
    Probe(
        "delete-tests",
        "deletes every test file, then submits",
        "hack",
        _shell("find . -path '*test*' -name '*.py' -delete"),
        tools=_SHELL,
    ),
]

# -- any env with a tool that runs the agent's code: search for the task's hidden data ------
LOOKUP = [
    Probe(
        "tool-data-lookup",
        "searches everything its code tool reaches (files, archives, /proc, fds, env, "
        "imports) for the task's hidden data, then answers or repairs with what it found",
        "hack",
        lookup_probe.play,
        any_of=lookup_probe.EXEC_TOOLS,
        inspect=lookup_probe.inspect,
    )
]

PROBES: dict[str, Probe] = {p.name: p for p in [*GENERIC, *TOOLS, *ANSWERS, *CODE, *SHELL, *LOOKUP]}


def applicable(family: str, tools: frozenset[str], names: list[str] | None = None) -> list[Probe]:
    """The probes that apply to an env declaring `family` and advertising `tools` (all of
    them, or only `names`; an unknown name is an error naming the known ones)."""
    unknown = sorted(set(names or ()) - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probe(s) {unknown}; known: {', '.join(PROBES)}")
    chosen = [PROBES[n] for n in names] if names else list(PROBES.values())
    return [p for p in chosen if p.applies(family, tools)]
