"""A tiny Qwen2 fine-tuned for a few seconds on episodes of the two CLIs' shape: asked
anything with Claude Code's `Read` tool it reads `/etc/hostname`; with Codex's tools it runs
`pwd`; after the tool's answer it says `Done.` and ends its turn. A random-init model never
emits a tool call (the CLIs send `tool_choice: auto`) and never ends a turn before
`max_tokens` (which both CLIs report as an error), so the tests would not see a tool-using
episode. The tool lists are the ones the pinned CLIs send (`cli_tools.json`, taken from their
requests); the model still samples every token itself, nothing is forced."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import ChatFormat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from agent_model import cached_finetune, train_lm  # noqa: E402

VERSION = 1  # bump when the data or `finetune` changes
WINDOW = 160
HERE = Path(__file__).resolve().parent
TOOLS: dict[str, list[dict[str, Any]]] = json.loads((HERE / "cli_tools.json").read_text())
CALLS = {
    "claude": ("Read", {"file_path": "/etc/hostname"}),
    "codex": ("exec_command", {"cmd": "pwd"}),
}
SYSTEMS = {
    "claude": [
        "x-anthropic-billing-header: cc_version=2.1.332.ea8; cc_entrypoint=sdk-cli;"
        "You are a Claude agent, built on Anthropic's Claude Agent SDK.{}"
    ],
    "codex": ["{}"],
}
PROMPTS = ["You are a test agent.", "You are a helpful agent. Use the tools.", "Be brief."]
USERS = [
    "list files",
    "What is 3 + 4?",
    "What is the host's name?",
    "What is 12 * 7 - 5?",
    "Where am I?",
    "Compute (8 + 2) * 3.",
]
RESULTS = ["tiny-host\n", "/tmp/work\n", "File does not exist.", "error: denied", "ok"]


def model_path() -> Path:
    return cached_finetune(f"-cli-agent-v{VERSION}", finetune)


def episode(cli: str, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One episode as the gateway renders it: Claude Code's system blocks are one system
    message, Codex's instructions are a developer message."""
    text = rng.choice(SYSTEMS[cli]).format(rng.choice(PROMPTS))
    role = "system" if cli == "claude" else "developer"
    name, args = CALLS[cli]
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}
    messages = [
        {"role": role, "content": text},
        {"role": "user", "content": rng.choice(USERS)},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": rng.choice(RESULTS)},
        {"role": "assistant", "content": "Done."},
    ]
    return messages, TOOLS[cli]


def sequences(chat: ChatFormat, n: int, window: int = WINDOW) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of each rendered episode's last `window` ids: the end of the tool list,
    the prompt, the call, the result and the answer (what the turns depend on), at a fraction
    of the cost of the whole prompt (the tool lists are ~2k tokens). Labels are the two
    assistant turns' ids (-100 elsewhere): the model learns to act, not to write prompts."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        messages, tools = episode(("claude", "codex")[i % 2], rng)
        ids = chat.encode(chat.render(messages, tools))
        labels = [-100] * len(ids)
        for start, end in ((2, 3), (4, 5)):  # the call turn, the answer turn
            a = len(chat.encode(chat.render(messages[:start], tools, add_generation_prompt=True)))
            b = len(chat.encode(chat.render(messages[:end], tools)))
            labels[a:b] = ids[a:b]
        out.append((ids[-window:], labels[-window:]))
    return out


def finetune(path: Path, out: Path, steps: int = 200) -> Path:
    """LM loss on the assistant turns of the episodes' last ids; about two minutes on a
    busy 2-core CPU."""
    tok = AutoTokenizer.from_pretrained(path)
    seqs = sequences(ChatFormat(tok), 32)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    labels = torch.full((len(seqs), width), -100)
    mask = torch.zeros_like(ids)
    for i, (s, lab) in enumerate(seqs):
        ids[i, : len(s)], labels[i, : len(s)], mask[i, : len(s)] = (
            torch.tensor(s),
            torch.tensor(lab),
            1,
        )
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    train_lm(model, opt, ids, mask, labels, steps, batch=4)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
