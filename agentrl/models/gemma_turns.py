"""The chat template agentrl gives a Gemma base checkpoint that ships none: Gemma's turn format.

Why: a base GGUF (Gemma 3 270M, the `gemma3-270m` preset) carries no chat template, but
agentrl renders every prompt and observation with the tokenizer's template. Its vocabulary
already has Gemma's turn tokens, `<start_of_turn>` and `<end_of_turn>` (single control
tokens), the format Google's instruction-tuned Gemma 3 checkpoints are trained on, so any
fine-tune of the base model starts from the format its later instruct sibling uses, and the
end-of-turn token is one id the rollout can stop on (`<end_of_turn>` is in
`agentrl.chat.format.KNOWN_STOP_TOKENS`):

    <bos><start_of_turn>user
    {system}\n\n{first user message}<end_of_turn>
    <start_of_turn>model
    {assistant message}<end_of_turn>
    <start_of_turn>model            (the generation prompt)

It is gemma-3-*-it's template with three changes, each for token-exact rollouts:

* content is rendered verbatim (Gemma's template `trim`s it; a sampled trailing newline would
  then re-render differently from what the model saw);
* no user/model alternation check (an env may answer a tool result and add feedback, two user
  turns in a row; Gemma's template raises there);
* it ignores `tools`, on purpose: `agentrl.chat.ChatFormat` then finds that the template does
  not render tools and injects them hermes style (`agentrl.chat.inject`: schemas and the
  `<tool_call>{json}</tool_call>` instructions in the system text, calls as `<tool_call>`
  blocks in the model turn, results as a user turn of `<tool_response>` blocks), the same
  mechanism as SmolLM2's ChatML; the tool-call parser is `hermes`. A `tool` message rendered
  without injection shows as a `tool` turn.

A system message is folded into the first turn, as Gemma's template does (Gemma has no system
role). `agentrl.models.gguf.convert` writes this template into the converted directory
(`chat_template.jinja`) when the GGUF has no template and its vocabulary has both turn tokens.
"""

from __future__ import annotations

from typing import Any

START, END = "<start_of_turn>", "<end_of_turn>"

GEMMA_TURN_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_prefix = messages[0]['content'] ~ '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- if not loop_messages -%}"
    "{{- '<start_of_turn>user\\n' ~ messages[0]['content'] ~ '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- else -%}"
    "{%- set first_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' ~ role ~ '\\n' ~ (first_prefix if loop.first else '') -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- elif message['content'] -%}"
    "{%- for part in message['content'] if part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<start_of_turn>model\\n' -}}"
    "{%- endif -%}"
)


def has_turn_tokens(tokenizer: Any) -> bool:
    """Whether `<start_of_turn>` and `<end_of_turn>` are each one token of `tokenizer`."""
    return all(len(tokenizer.encode(t, add_special_tokens=False)) == 1 for t in (START, END))
