"""A step whose episodes all ended before generating a single token stops the run, loudly.

Why: such a step still "trains": every reward is 0, every advantage 0, the loss 0, and the
metrics look like a policy that has not learned yet. Seen on a GPU (the gemma3-calc matrix
cell): a broken tokenizer made every prompt longer than `rollout.max_total_tokens`, each
episode ended `max_tokens` before the engine was asked, and the run spent its whole wall
budget on zero-token steps with nothing but `response_length/mean 0` to show for it. Nothing a
later step does changes that (the prompts and the budget are the same), so the first such step
raises one error naming the cause: prompts at or over the token budget, or an engine that
returned nothing (its error, if it gave one). Episodes that failed for infrastructure reasons
(timeouts, sandbox outages: `Trajectory.infra_failed`) are not counted: they train nothing
already (`exclusion` skips a step left with none) and may pass.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from agentrl.types import TrajectoryGroup


class NothingGeneratedError(RuntimeError):
    """Every episode of a training step ended before generating a token."""


def check_generated(
    groups: Sequence[TrajectoryGroup], step: int, max_total_tokens: int, max_new_tokens: int
) -> None:
    """Raise `NothingGeneratedError` if `groups` hold episodes that did not fail for
    infrastructure reasons and none of them generated a token."""
    trajs = [t for g in groups for t in g.trajectories if not t.infra_failed]
    if not trajs or any(t.response_ids for t in trajs):
        return  # infra failures train nothing anyway (`exclusion`) and may pass: not counted
    ends = collections.Counter(t.termination for t in trajs)
    lengths = sorted(len(t.prompt_ids) for t in trajs)
    over = sum(n >= max_total_tokens for n in lengths)
    head = (
        f"step {step}: none of its {len(trajs)} episodes generated a token "
        f"(terminations: {', '.join(f'{r} {k}' for r, k in ends.most_common())}); "
        f"prompts are {lengths[0]}-{lengths[-1]} tokens"
    )
    if over == len(trajs):
        raise NothingGeneratedError(
            f"{head}, every one at or over rollout.max_total_tokens={max_total_tokens}, so no "
            "episode reached the engine: raise rollout.max_total_tokens above the prompt plus "
            f"sampling.max_new_tokens={max_new_tokens}, shorten the prompt, or check that the "
            "tokenizer tokenizes (a broken one makes prompts several times longer)"
        )
    errors = [str(t.metadata["error"]) for t in trajs if t.metadata.get("error")]
    why = f"; first error: {errors[0]}" if errors else ""
    raise NothingGeneratedError(
        f"{head} ({over} at or over rollout.max_total_tokens={max_total_tokens}); the engine "
        f"returned no tokens for the others (its capacity or its failures){why}"
    )
