"""Template linter on the real templates, the tiny one, and deliberately broken ones."""

from __future__ import annotations

import pytest

from agentrl.chat import lint_template

CHATML_NO_TOOLS = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("name", ["tiny", "qwen2_5", "llama3_1"])
def test_prefix_preserving_templates_pass(name: str, tokenizers: dict) -> None:
    report = lint_template(tokenizers[name])
    assert report.ok, report.format()
    assert report.prefix_preserving and not report.think_stripping
    assert all(f.status == "OK" for f in report.findings), report.format()
    assert "after the sampled end-of-turn token" in report.append_strategy
    assert report.tool_format == ("llama3" if name == "llama3_1" else "hermes")


def test_qwen3_think_stripping_is_a_warning(tokenizers: dict) -> None:
    report = lint_template(tokenizers["qwen3"])
    assert report.ok and report.think_stripping and not report.prefix_preserving
    for check in ("think_stripping", "prefix_preservation", "token_exact_append"):
        finding = report.get(check)
        assert finding.status == "WARN" and finding.fix, report.format()
    assert report.get("tools_rendered").status == "OK"


def test_template_without_tools_gets_hermes_injection(tokenizers: dict) -> None:
    """A template that ignores `tools` is not a dead end: the schemas are injected into the
    system message hermes style, and the linter says so (WARN) and checks the result."""
    report = lint_template(tokenizers["tiny"], chat_template=CHATML_NO_TOOLS)
    assert report.ok, report.format()
    finding = report.get("tools_rendered")
    assert finding.status == "WARN" and "injects" in finding.message
    assert report.tool_format == "hermes"
    for check in ("tool_calls_rendered", "tool_results_rendered", "token_exact_append"):
        assert report.get(check).status == "OK", report.format()
    assert report.get("tool_parser").status == "OK"


def test_broken_template_is_reported_not_raised(tokenizers: dict) -> None:
    report = lint_template(tokenizers["tiny"], chat_template="{{ raise_exception('nope') }}")
    assert not report.ok
    assert any("nope" in f.message for f in report.findings)
