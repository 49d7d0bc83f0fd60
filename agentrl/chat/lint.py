"""Chat-template linter: find the template bugs that silently break multi-turn RL, before any
GPU time is spent.

Checks, each reported OK / WARN / FAIL with a plain fix:

* `tools_rendered`: does the template show `tools` to the model at all? If not, agentrl
  injects them hermes style (`agentrl.chat.inject`) and the finding says so.
* `tool_calls_rendered` / `tool_results_rendered`: assistant `tool_calls` and `tool` messages
  appear in the rendered history.
* `end_of_turn`: assistant turns end with a special token the engine can stop on.
* `prefix_preservation`: rendering turn k+1 extends turn k's tokens over a multi-turn tool
  conversation (templates that don't make any re-tokenizing pipeline drift).
* `think_stripping`: earlier `<think>` blocks dropped on re-render (Qwen3 and R1 styles).
* `token_exact_append`: simulating the rollout (prompt + sampled ids + fixed-base observation
  deltas) reproduces the template's own rendering of the whole episode.
* `tool_parser`: which tool-call parser `auto` picks, and that it round-trips a rendered call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.chat.format import ChatFormat
from agentrl.types import Message, ToolCall

Status = Literal["OK", "WARN", "FAIL"]
_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_zq",
        "description": "Look a key up.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
    },
}
_REASONING = "PLANZQ"


@dataclass
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""


@dataclass
class LintReport:
    """All findings plus the facts the rollout needs."""

    findings: list[Finding] = field(default_factory=list)
    tool_format: str = ""
    stop_tokens: list[str] = field(default_factory=list)
    append_strategy: str = ""
    prefix_preserving: bool = False
    think_stripping: bool = False

    @property
    def ok(self) -> bool:
        return all(f.status != "FAIL" for f in self.findings)

    def add(self, check: str, status: Status, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, status, message, fix))

    def get(self, check: str) -> Finding:
        return next(f for f in self.findings if f.check == check)

    def format(self) -> str:
        lines = [
            f"{f.status:<4}  {f.check}: {f.message}" + (f"\n      fix: {f.fix}" if f.fix else "")
            for f in self.findings
        ]
        return "\n".join(lines)


def _call(i: int) -> ToolCall:
    return ToolCall("lookup_zq", {"key": f"k{i}"}, id=f"call_{i}")


def conversation(think: bool) -> list[Message]:
    """A two-query tool conversation: system, user, call, result, call, result, answer,
    user, call, result, answer."""
    pre = f"<think>\n{_REASONING}\n</think>\n\n" if think else ""
    msgs = [Message("system", "You are helpful."), Message("user", "Find k0 and k1.")]
    for i in range(2):
        msgs += [Message("assistant", pre, tool_calls=[_call(i)]), _result(i)]
    msgs += [Message("assistant", pre + "Done: v0 v1."), Message("user", "Now k2.")]
    msgs += [Message("assistant", pre, tool_calls=[_call(2)]), _result(2)]
    msgs += [Message("assistant", pre + "Done: v2.")]
    return msgs


def _result(i: int) -> Message:
    return Message("tool", f"VALUEZQ{i}", tool_call_id=f"call_{i}", name="lookup_zq")


def lint_template(
    tokenizer: Any, *, chat_template: str | None = None, **template_kwargs: Any
) -> LintReport:
    """Lint `tokenizer`'s chat template (or `chat_template`). Never raises for template bugs:
    a template that fails to render is itself a FAIL finding."""
    report = LintReport()
    try:
        chat = ChatFormat(tokenizer, chat_template=chat_template, template_kwargs=template_kwargs)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        report.add(
            "template",
            "FAIL",
            f"cannot use the chat template: {e}",
            "give the tokenizer a chat template (tokenizer.chat_template = ...)",
        )
        return report
    report.tool_format = chat.tool_format
    report.stop_tokens = [tokenizer.convert_ids_to_tokens(i) for i in chat.stop_token_ids]
    checks = (
        _check_tools,
        _check_end_of_turn,
        _check_prefix,
        _check_think,
        _check_append,
        _check_parser,
    )
    for check in checks:
        try:
            check(chat, report)
        except Exception as e:  # noqa: BLE001 - a crashing render is a finding
            report.add(
                check.__name__.removeprefix("_check_"),
                "FAIL",
                f"template raised while rendering: {type(e).__name__}: {e}",
                "fix the template so it renders multi-turn tool conversations",
            )
    return report


def _check_tools(chat: ChatFormat, report: LintReport) -> None:
    user = [Message("user", "hi")]
    with_tools = chat.render(user, [_TOOL], add_generation_prompt=True)
    if chat.inject:
        ok = "lookup_zq" in with_tools
        report.add(
            "tools_rendered",
            "WARN" if ok else "FAIL",
            "the template ignores `tools`; agentrl injects the schemas into the system "
            "message (hermes style: <tool_call> calls, <tool_response> results as user turns) "
            f"and parses calls with {chat.tool_format!r}"
            + ("" if ok else ", but the injected schemas do not appear in the render"),
            "nothing to do if the model can follow the injected format; pass a tool-capable "
            "template to use the model's own",
        )
    elif "lookup_zq" not in with_tools:
        report.add(
            "tools_rendered",
            "FAIL",
            "the template ignores `tools`: the model is never shown the tool schemas, "
            "so tools never fire",
            "use a tool-capable template (e.g. the model's official one) or list the "
            "tools in the system prompt yourself",
        )
    else:
        report.add("tools_rendered", "OK", "tool schemas are rendered into the prompt")
    conv = conversation(think=False)[:4]
    text = chat.render(conv, [_TOOL])
    if '"k0"' not in text:
        report.add(
            "tool_calls_rendered",
            "WARN",
            "assistant tool_calls are dropped from the rendered history",
            "harmless for agentrl rollouts (sampled tokens are kept), but histories "
            "re-rendered for evaluation will miss the calls",
        )
    else:
        report.add("tool_calls_rendered", "OK", "assistant tool calls are rendered")
    if "VALUEZQ0" not in text:
        report.add(
            "tool_results_rendered",
            "FAIL",
            "`tool` messages are not rendered: the model never sees tool results",
            "use a template with a tool/ipython role",
        )
    else:
        report.add("tool_results_rendered", "OK", "tool results are rendered")


def _check_end_of_turn(chat: ChatFormat, report: LintReport) -> None:
    close = chat.closing_ids()
    tok = chat.tokenizer
    if not close or close[0] not in chat.stop_token_ids:
        report.add(
            "end_of_turn",
            "WARN",
            f"assistant turns end with {chat.decode(close)!r}, not a stop token",
            "set sampling.stop to the turn separator, or the model runs to its "
            "token budget every turn",
        )
        return
    sep = chat.decode(close[1:])
    report.add(
        "end_of_turn",
        "OK",
        f"assistant turns end with {tok.convert_ids_to_tokens(close[0])}"
        + (
            f"; the separator {sep!r} after it is appended with the observation (mask 0)"
            if sep
            else ""
        ),
    )


def _prefix_break(chat: ChatFormat, msgs: list[Message]) -> int | None:
    """First k where render(msgs[:k]) is not a token prefix of render(msgs[:k+1])."""
    prev: list[int] | None = None
    for k in range(2, len(msgs) + 1):
        ids = chat.encode(chat.render(msgs[:k], [_TOOL]))
        if prev is not None and ids[: len(prev)] != prev:
            return k - 1
        prev = ids
    return None


def _check_prefix(chat: ChatFormat, report: LintReport) -> None:
    plain = _prefix_break(chat, conversation(think=False))
    thinking = _prefix_break(chat, conversation(think=True))
    report.prefix_preserving = plain is None and thinking is None
    if report.prefix_preserving:
        report.add("prefix_preservation", "OK", "each turn's tokens extend the previous turn's")
        return
    at = plain if plain is not None else thinking
    report.add(
        "prefix_preservation",
        "WARN",
        f"adding message {at} re-renders earlier turns differently"
        + ("" if plain is not None else " (only when assistant turns carry <think>)"),
        "fine for agentrl rollouts (token-in/token-out keeps sampled ids); never "
        "re-tokenize re-rendered histories for training",
    )


def _check_think(chat: ChatFormat, report: LintReport) -> None:
    think = f"<think>\n{_REASONING}\n</think>\n\n"
    msgs = [
        Message("user", "q1"),
        Message("assistant", think + "a1"),
        Message("user", "q2"),
        Message("assistant", think + "a2"),
    ]
    kept = chat.render(msgs).count(_REASONING)
    report.think_stripping = kept < 2
    if not report.think_stripping:
        report.add("think_stripping", "OK", "earlier <think> blocks are kept on re-render")
    else:
        report.add(
            "think_stripping",
            "WARN",
            f"the template drops earlier <think> blocks ({kept} of 2 kept)",
            "agentrl keeps the reasoning tokens as sampled, so training matches what "
            "the model saw; use the same history when evaluating",
        )


def _simulate(chat: ChatFormat, msgs: list[Message]) -> tuple[list[int], list[int]]:
    """(rollout ids, template ids) for a conversation whose assistant turns follow the template."""
    first = next(i for i, m in enumerate(msgs) if m.role == "assistant")
    ids = chat.prompt_ids(msgs[:first], [_TOOL])
    i = first
    while i < len(msgs):
        full = chat.assistant_ids(msgs[i], [_TOOL])
        cut = next((j + 1 for j, t in enumerate(full) if t in chat.stop_token_ids), len(full))
        sampled = full[:cut]
        ids += sampled
        j = i + 1
        while j < len(msgs) and msgs[j].role != "assistant":
            j += 1
        if j < len(msgs):
            ids += chat.observation_ids(msgs[i + 1 : j], [_TOOL], sampled_ids=sampled)
        i = j
    return ids, chat.encode(chat.render(msgs, [_TOOL]))


def _check_append(chat: ChatFormat, report: LintReport) -> None:
    close = chat.closing_ids()
    skip = bool(close) and close[0] in chat.stop_token_ids
    report.append_strategy = (
        "fixed-base delta after the sampled end-of-turn token"
        if skip
        else "fixed-base delta including the full turn closing"
    )
    ids, rendered = _simulate(chat, conversation(think=False))
    n = len(ids) if len(ids) < len(rendered) else len(rendered)
    if rendered[:n] == ids[:n] and len(rendered) >= len(ids):
        report.add(
            "token_exact_append",
            "OK",
            f"{report.append_strategy} reproduces the template's tokens exactly",
        )
        return
    first = next((k for k in range(n) if ids[k] != rendered[k]), n)
    context = chat.decode(rendered[max(0, first - 8) : first + 8])
    status: Status = "WARN" if (report.think_stripping or not report.prefix_preserving) else "FAIL"
    report.add(
        "token_exact_append",
        status,
        f"rollout tokens differ from a re-render at token {first} (near {context!r})",
        "expected for templates that re-render history; agentrl trains on the "
        "sampled tokens, so this is safe"
        if status == "WARN"
        else "report this template: observation deltas do not match it",
    )


def _check_parser(chat: ChatFormat, report: LintReport) -> None:
    msg = Message("assistant", "", tool_calls=[_call(7)])
    text = chat.decode(chat.assistant_ids(msg, [_TOOL]), skip_special_tokens=False)
    for tok in chat.stop_token_ids:
        text = text.replace(chat.tokenizer.convert_ids_to_tokens(tok), "")
    _, calls = chat.parse(text)
    if calls and calls[0].name == "lookup_zq" and calls[0].arguments == {"key": "k7"}:
        report.add("tool_parser", "OK", f"parser {chat.tool_format!r} reads the template's calls")
    else:
        report.add(
            "tool_parser",
            "FAIL",
            f"parser {chat.tool_format!r} cannot read a call rendered by the template",
            "set rollout.tool_format to the model's format (hermes, llama3)",
        )
