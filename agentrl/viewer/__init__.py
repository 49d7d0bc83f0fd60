"""Token-level trajectory viewer: one self-contained HTML page per trajectory file.

    agentrl view rollouts.jsonl --tokenizer tiny:qwen2
    agentrl view --diff rollouts.jsonl --tokenizer /ckpt/Qwen3-8B

Each episode shows every token coloured by its loss mask (trained vs env/tool tokens), the
rollout and trainer logprobs and IS ratio per token on hover, tool calls and results, turn
rewards and images; `--diff` adds where a chat-template re-render of the messages would
tokenize differently from what was sampled (see `diff`).
"""

from .diff import Drift, render_ids, template_drift
from .episodes import episode_record, load_tokenizer, make_decoder, tokenizer_hint
from .page import ViewResult, build_records, render_page, write_view

__all__ = [
    "Drift",
    "ViewResult",
    "build_records",
    "episode_record",
    "load_tokenizer",
    "make_decoder",
    "render_ids",
    "render_page",
    "template_drift",
    "tokenizer_hint",
    "write_view",
]
