"""The env's oracle, tokenised against a recipe's budgets: a budget that cuts a solution.

A recipe whose `sampling.max_new_tokens` was one token shorter than one of the oracle's tool
calls capped its env at 59% success without a word: every episode needing that call ended
`overlong`. The oracle's episodes are the shortest known solutions, so each of its turns
(stop token included) must fit `sampling.max_new_tokens`, each episode `rollout.max_total_tokens`,
and its turn count the turn limit. `agentrl doctor` and `agentrl envs check --config` ask here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .checks import Finding


def check_oracle_budgets(
    env_factory: Callable[[], Any], tokenizer: Any, cfg: Any, episodes: int = 16
) -> list[Finding]:
    """Findings for `episodes` oracle episodes (seeds 0..) of `env_factory` rendered with
    `tokenizer`, against `cfg` (a TrainConfig): WARN per budget some episode exceeds."""
    from agentrl.chat import ChatFormat
    from agentrl.trainer.sft import demo_trajectory

    chat = ChatFormat(tokenizer, cfg.rollout.tool_format)
    max_new, max_total = cfg.sampling.max_new_tokens, cfg.rollout.max_total_tokens
    env = env_factory()
    try:
        limit = cfg.rollout.max_turns or int(getattr(env, "max_turns", 0) or 0)
        demos = [demo_trajectory(env, chat, seed) for seed in range(episodes)]
    finally:
        env.close()
    if any(d is None for d in demos):
        return [Finding("OK", "env has no oracle: its turns cannot be checked against budgets")]
    turns = [sampled_spans(d.loss_mask) for d in demos if d is not None]
    totals = [len(d.prompt_ids) + len(d.response_ids) for d in demos if d is not None]
    longest = max((max(t) for t in turns if t), default=0)
    out: list[Finding] = []
    cut = sum(any(n > max_new for n in t) for t in turns)
    if cut:
        out.append(
            Finding(
                "WARN",
                f"sampling.max_new_tokens={max_new} cuts the oracle's solution in {cut} of "
                f"{len(turns)} episodes (its longest turn is {longest} tokens)",
                "a turn that hits the budget ends the episode as overlong: those tasks "
                "cannot be solved the oracle's way",
                f"set sampling.max_new_tokens >= {longest} (with some room for the model)",
            )
        )
    over = sum(n > max_total for n in totals)
    if over:
        out.append(
            Finding(
                "WARN",
                f"rollout.max_total_tokens={max_total} is below the oracle's episode in "
                f"{over} of {len(totals)} episodes (longest {max(totals)} tokens)",
                "the episode budget ends those episodes before the answer",
                f"set rollout.max_total_tokens >= {max(totals)}",
            )
        )
    many = max(len(t) for t in turns)
    if limit and many > limit:
        out.append(
            Finding(
                "WARN",
                f"the turn limit ({limit}) is below the oracle's {many} turns",
                "episodes end at the limit before the answer",
                f"set rollout.max_turns >= {many}",
            )
        )
    if not out:
        out.append(
            Finding(
                "OK",
                f"the oracle fits the budgets: longest turn {longest}/{max_new} tokens, "
                f"longest episode {max(totals)}/{max_total}, {many} turns",
            )
        )
    return out


def sampled_spans(mask: list[int]) -> list[int]:
    """Lengths of the runs of 1s in a loss mask: the tokens of each assistant turn."""
    spans: list[int] = []
    run = 0
    for m in [*mask, 0]:
        if m:
            run += 1
        elif run:
            spans.append(run)
            run = 0
    return spans
