"""What the text-in/text-out adapters share: the assistant's whole reply as one string.

TextArena games, skyrl-gym envs and verifiers' rewards read the model's raw reply and parse it
themselves (`[move]`, `<search>...</search>`, `\\boxed{}`). agentrl hands envs the reply already
split into content and tool calls, so the adapters put the calls back as the model wrote them
(their `raw` text in the template's `<tool_call>` form): nothing the model wrote is lost.
Setting `rollout.tool_format=none` for such envs keeps the reply in `content` untouched.
"""

from __future__ import annotations

from agentrl.types import Message


def reply_text(action: Message) -> str:
    """The assistant message as the text the model produced."""
    parts = [action.content] if action.content else []
    parts += [f"<tool_call>\n{c.raw}\n</tool_call>" for c in action.tool_calls if c.raw]
    return "\n".join(parts)
