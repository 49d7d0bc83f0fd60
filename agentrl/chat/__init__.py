"""Chat templates, tool-call parsers and the template linter (token-in/token-out)."""

from agentrl.chat.format import ChatFormat, chat_format_for, to_chat
from agentrl.chat.lint import Finding, LintReport, lint_template
from agentrl.chat.parsers import FORMATS, detect_format, parse, split_reasoning

__all__ = [
    "FORMATS",
    "ChatFormat",
    "chat_format_for",
    "Finding",
    "LintReport",
    "detect_format",
    "lint_template",
    "parse",
    "split_reasoning",
    "to_chat",
]
