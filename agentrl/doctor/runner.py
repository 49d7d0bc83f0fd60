"""`run_doctor`: every preflight check for one config, in the order a run would hit them.

Sections: stack (versions, GPU, engine), sandbox, template (present + linter), env and tools
(reset, tool callability, tools in the prompt, parser round trip), budgets (context and first
prompt; the oracle's turns against the token budgets), dry run (oracle episodes on CPU). A check that crashes becomes a FAIL naming the
exception, so one broken component never hides the findings of the others.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any

from .checks import (
    Finding,
    check_budgets,
    check_dry_run,
    check_template_lint,
    check_template_present,
    check_tool_parser,
    check_tools_callable,
    check_tools_rendered,
    context_length,
    count_tokens,
    render_prompt,
)
from .stack import check_sandbox, check_stack, check_trainer_levers


def _guard(section: str, fn: Callable[[], Finding | list[Finding]]) -> list[Finding]:
    try:
        res = fn()
    except Exception as e:  # noqa: BLE001 - a crashing check is itself a finding
        where = traceback.extract_tb(e.__traceback__)[-1]
        return [
            Finding(
                "FAIL",
                f"check crashed: {type(e).__name__}: {e}",
                f"{where.filename}:{where.lineno}",
                "see the message; rerun with the failing component alone",
                section,
            )
        ]
    found = res if isinstance(res, list) else [res]
    for f in found:
        f.section = f.section or section
    return found


def _load_model_bits(path: str, tokenizer_path: str | None, cache_dir: str) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoTokenizer

    from agentrl.models.tiny import resolve_model_path

    resolved = resolve_model_path(path, cache_dir)
    tok_dir = resolve_model_path(tokenizer_path, cache_dir) if tokenizer_path else resolved
    return AutoTokenizer.from_pretrained(tok_dir), AutoConfig.from_pretrained(resolved)


def run_doctor(
    config: Any | None = None,
    model_path: str | None = None,
    *,
    dry_run_episodes: int = 2,
    sandbox: bool = True,
) -> list[Finding]:
    """All findings for `config` (a TrainConfig; defaults when None) and `model_path`
    (overrides `config.model.path`)."""
    from agentrl.config import TrainConfig

    cfg = config or TrainConfig()
    path = model_path or cfg.model.path
    findings = _guard("stack", lambda: check_stack(cfg))
    if sandbox:
        findings += _guard("sandbox", check_sandbox)

    bits: dict[str, Any] = {}

    def load() -> Finding:
        bits["tok"], bits["cfg"] = _load_model_bits(path, cfg.model.tokenizer, cfg.model.cache_dir)
        return Finding("OK", f"model config and tokenizer load: {path}")

    findings += _guard("model", load)
    tok = bits.get("tok")
    if tok is not None:
        findings += _guard("template", lambda: check_template_present(tok))
        if tok.chat_template:
            findings += _guard("template", lambda: check_template_lint(tok))

    from agentrl.envs import make

    env_id, kwargs = cfg.data.env, dict(cfg.data.env_kwargs)
    factory = functools.partial(make, env_id, **kwargs)
    first: dict[str, Any] = {}

    def reset() -> list[Finding]:
        env = factory()
        try:
            obs, _ = env.reset(seed=0)
            first["messages"], first["tools"] = obs.messages, obs.tools
            return [Finding("OK", f"env {env_id} resets"), *check_tools_callable(env, obs.tools)]
        finally:
            env.close()

    findings += _guard("env", reset)
    prompt_tokens: int | None = None
    if first and tok is not None and tok.chat_template:
        prompt = render_prompt(tok, first["messages"], first["tools"])
        prompt_tokens = count_tokens(tok, prompt)
        findings += _guard("tools", lambda: check_tools_rendered(prompt, first["tools"]))
        findings += _guard(
            "tools", lambda: check_tool_parser(tok, first["tools"], cfg.rollout.tool_format)
        )
    if "cfg" in bits:
        findings += _guard("trainer", lambda: check_trainer_levers(cfg, bits["cfg"]))
        findings += _guard(
            "budget",
            lambda: check_budgets(
                cfg.rollout.max_total_tokens,
                cfg.sampling.max_new_tokens,
                context_length(bits["cfg"]),
                prompt_tokens,
            ),
        )
    if tok is not None and tok.chat_template:
        from .oracle import check_oracle_budgets

        findings += _guard("budget", lambda: check_oracle_budgets(factory, tok, cfg))
    if dry_run_episodes > 0:
        findings += _guard("dry run", lambda: check_dry_run(factory, dry_run_episodes))
    return findings


def exit_code(findings: list[Finding]) -> int:
    return 1 if any(f.level == "FAIL" for f in findings) else 0
