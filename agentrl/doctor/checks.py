"""Doctor checks for the model side of a run: template, tools, token budgets, env dry run.

Each check is a small function returning `Finding`s. They target the failures that cost a
GPU day before anyone notices: tools that never fire (the template drops the `tools` list,
or the rollout's parser reads a different call format than the template writes), budgets
that cannot fit the model's context or even the first prompt, and envs whose advertised
tools cannot actually be called.
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.types import Message, ToolCall

Level = Literal["OK", "WARN", "FAIL"]
_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


@dataclass
class Finding:
    """One result: `fix` says what to change when the level is WARN or FAIL."""

    level: Level
    title: str
    detail: str = ""
    fix: str = ""
    section: str = ""


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("function", {}).get("name", "") for t in tools]


def render_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]]) -> str:
    """The first prompt as the rollout renders it (tools injected if the template ignores
    them, see agentrl.chat.inject)."""
    from agentrl.chat import chat_format_for

    return chat_format_for(tokenizer).render(messages, tools, add_generation_prompt=True)


def count_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


# -- chat template -------------------------------------------------------------------------
def check_template_present(tokenizer: Any) -> Finding:
    if getattr(tokenizer, "chat_template", None):
        return Finding("OK", "tokenizer has a chat template")
    return Finding(
        "FAIL",
        "tokenizer has no chat template",
        "prompts cannot be rendered, so neither tools nor turns reach the model",
        "use an instruct/chat checkpoint, or set model.tokenizer to a directory whose "
        "tokenizer_config.json has a chat_template",
    )


def check_template_lint(tokenizer: Any) -> list[Finding]:
    """The project's template linter (agentrl.chat), mapped onto doctor findings."""
    try:
        from agentrl.chat import lint_template
    except ImportError:
        return [Finding("WARN", "template linter unavailable", "agentrl.chat is not importable")]
    report = lint_template(tokenizer)
    return [Finding(f.status, f"template: {f.check}", f.message, f.fix) for f in report.findings]


# -- tools ---------------------------------------------------------------------------------
def check_tools_callable(env: Any, tools: list[dict[str, Any]]) -> list[Finding]:
    """Every advertised tool has a usable name and (for ToolEnv) an implementation."""
    names = tool_names(tools)
    if not names:
        return [
            Finding("OK", "env advertises no tools", "nothing to call; single-turn or chat env")
        ]
    out = []
    for n in names:
        if not _TOOL_NAME.match(n or ""):
            out.append(
                Finding(
                    "FAIL",
                    f"tool name {n!r} cannot be emitted reliably",
                    "names with spaces or odd characters are mangled by models and parsers",
                    "rename the tool to letters, digits and underscores",
                )
            )
    impl = getattr(getattr(env, "tools", None), "names", None)
    if isinstance(impl, list):
        for n in names:
            if n not in impl:
                close = difflib.get_close_matches(n, impl, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(
                    Finding(
                        "FAIL",
                        f"tool {n!r} is advertised but not implemented{hint}",
                        f"the env's ToolSet has {impl}; every call to {n!r} returns an error",
                        "make the schema name match the @tool function name (or pass "
                        "name= to @tool)",
                    )
                )
    if not out:
        out.append(Finding("OK", f"tools callable: {', '.join(names)}"))
    return out


def check_tools_rendered(prompt: str, tools: list[dict[str, Any]]) -> Finding:
    """Tools never fire if the model is never told they exist."""
    names = tool_names(tools)
    missing = [n for n in names if n and n not in prompt]
    if not names:
        return Finding("OK", "no tools to render")
    if missing:
        return Finding(
            "FAIL",
            f"tools missing from the rendered prompt: {', '.join(missing)}",
            "the chat template ignores the `tools` argument, so the model never learns the "
            "tools exist and never calls them (training runs, reward stays flat)",
            "use a tool-aware chat template (e.g. the model's official one, or the hermes "
            "template in agentrl.models.tiny.CHAT_TEMPLATE), or list the tools in the "
            "env's system prompt",
        )
    return Finding("OK", "every tool appears in the rendered prompt")


def _assistant_text(tokenizer: Any, call: ToolCall) -> str:
    """What the template writes for one assistant tool call (the text after the gen prompt)."""
    from agentrl.chat import chat_format_for

    chat = chat_format_for(tokenizer)
    tools = [{"type": "function", "function": {"name": call.name, "parameters": {}}}]
    user = [{"role": "user", "content": "hi"}]
    prefix = chat.render(user, tools, add_generation_prompt=True)
    full = chat.render([*user, Message("assistant", "", tool_calls=[call])], tools)
    return full[len(prefix) :] if full.startswith(prefix) else full


def check_tool_parser(tokenizer: Any, tools: list[dict[str, Any]], tool_format: str) -> Finding:
    """The configured parser must read back the calls this template writes, for each tool."""
    try:
        from agentrl.chat import FORMATS, parse
    except ImportError:
        return Finding("WARN", "tool-call parser unavailable", "agentrl.chat is not importable")
    names = [n for n in tool_names(tools) if n]
    if not names:
        return Finding("OK", "no tools to parse")
    from agentrl.chat import chat_format_for

    fmt = chat_format_for(tokenizer).tool_format if tool_format == "auto" else tool_format
    lost = []
    works: dict[str, int] = {}
    for n in names:
        # the id is 9 alphanumerics: Mistral's templates reject any other
        text = _assistant_text(tokenizer, ToolCall(n, {"x": 1}, id="call00000"))
        if n not in text:
            lost.append(f"{n} (template does not render assistant tool_calls)")
            continue
        if [c.name for c in parse(text, fmt)[1]] != [n]:
            lost.append(n)
        for other in FORMATS:
            if other != "none" and [c.name for c in parse(text, other)[1]] == [n]:
                works[other] = works.get(other, 0) + 1
    if not lost:
        return Finding("OK", f"parser {fmt!r} reads every tool call the template writes")
    good = [f for f, k in works.items() if k == len(names)]
    fix = (
        f"set rollout.tool_format to 'auto' or {good[0]!r}"
        if good
        else "use a template whose assistant tool calls a known parser reads "
        f"({', '.join(FORMATS)})"
    )
    return Finding(
        "FAIL",
        f"tool calls would never fire: parser {fmt!r} cannot read {', '.join(lost)}",
        f"rollout.tool_format={tool_format!r}; the model imitates the template's call format, "
        "the parser finds no call, and every episode ends after one turn",
        fix,
    )


# -- token budgets -------------------------------------------------------------------------
def context_length(model_config: Any) -> int | None:
    cfg = getattr(model_config, "text_config", None) or model_config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_budgets(
    max_total: int, max_new: int, context: int | None, prompt_tokens: int | None
) -> list[Finding]:
    out = []
    if context is None:
        out.append(Finding("WARN", "model context length unknown", "no max_position_embeddings"))
    elif max_total > context:
        out.append(
            Finding(
                "FAIL",
                f"rollout.max_total_tokens={max_total} exceeds the model context ({context})",
                "positions past the context are out of distribution (or raise in the engine)",
                f"set rollout.max_total_tokens <= {context}, or use a longer-context model",
            )
        )
    else:
        out.append(Finding("OK", f"budget {max_total} fits the model context ({context})"))
    if max_new >= max_total:
        out.append(
            Finding(
                "FAIL",
                f"sampling.max_new_tokens={max_new} >= rollout.max_total_tokens={max_total}",
                "one turn alone would exhaust the whole-episode budget",
                "lower sampling.max_new_tokens well below rollout.max_total_tokens",
            )
        )
    if prompt_tokens is None:
        return out
    room = max_total - prompt_tokens
    if room <= 0:
        out.append(
            Finding(
                "FAIL",
                f"the first prompt ({prompt_tokens} tokens) does not fit max_total_tokens="
                f"{max_total}",
                "every episode would end with max_tokens before one token is sampled",
                f"raise rollout.max_total_tokens above {prompt_tokens + max_new} or shorten the "
                "system prompt / tool descriptions",
            )
        )
    elif room < max_new:
        out.append(
            Finding(
                "WARN",
                f"first turn has {room} tokens of room, less than max_new_tokens={max_new}",
                f"prompt {prompt_tokens} + one turn {max_new} > budget {max_total}",
                f"raise rollout.max_total_tokens to >= {prompt_tokens + max_new}",
            )
        )
    else:
        out.append(
            Finding(
                "OK",
                f"first prompt {prompt_tokens} tokens; {room} left for turns and tool output",
            )
        )
    return out


# -- dry run -------------------------------------------------------------------------------
def check_dry_run(env_factory: Any, episodes: int = 2) -> list[Finding]:
    """Play `episodes` episodes with the env's oracle (no model): env and tools must work."""
    t0 = time.monotonic()
    rewards, tool_errors, turns, top = [], [], 0, 1.0
    for seed in range(episodes):
        env = env_factory()
        top = float(getattr(env, "reward_range", (0.0, 1.0))[1])
        try:
            env.reset(seed=seed)
            action = env.oracle_action()
            if action is None:
                return [
                    Finding(
                        "WARN",
                        "env has no oracle; dry run skipped",
                        "reset works, but tools were not exercised",
                        "implement oracle_action() so doctor and check_env can prove the env "
                        "is solvable",
                    )
                ]
            for _ in range(getattr(env, "max_turns", 8) + 1):
                _, reward, terminated, truncated, info = env.step(action)
                turns += 1
                for r in info.get("tool_results", []) or []:
                    if getattr(r, "is_error", False):
                        tool_errors.append(f"seed {seed}: {r.name}: {r.content[:160]}")
                if terminated or truncated:
                    break
                action = env.oracle_action()
                if action is None:
                    break
            rewards.append(float(reward))
        except Exception as e:  # noqa: BLE001 - the point is to report it
            return [
                Finding(
                    "FAIL",
                    f"dry run crashed: {type(e).__name__}: {e}",
                    f"seed {seed}, after {turns} steps",
                    "run `agentrl envs check <env id>` for the full contract check",
                )
            ]
        finally:
            env.close()
    dt = time.monotonic() - t0
    out = []
    if tool_errors:
        out.append(
            Finding(
                "FAIL",
                f"tools failed under the oracle ({len(tool_errors)} error(s))",
                "; ".join(tool_errors[:3]),
                "the env's own gold calls fail: fix the tool or its schema before training",
            )
        )
    if any(abs(r - top) > 1e-6 for r in rewards):
        out.append(
            Finding(
                "WARN",
                f"oracle rewards {rewards}, expected {top}",
                "the gold policy does not reach the max reward; the reward may be broken",
                "run `agentrl envs check <env id>`",
            )
        )
    if not out:
        out.append(
            Finding("OK", f"dry run: {episodes} oracle episodes, {turns} steps in {dt:.2f}s")
        )
    return out
