"""A training step whose episodes all ended before generating a token stops the run with one
error naming the cause (`agentrl.trainer.empty_step`), instead of training on zeros: prompts
over `rollout.max_total_tokens` (a real tiny run), or an engine that returned nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_synth import train_overrides

from agentrl.assembly import build_trainer
from agentrl.config import TrainConfig, load_config
from agentrl.trainer.empty_step import NothingGeneratedError, check_generated
from agentrl.types import Trajectory, TrajectoryGroup

pytestmark = pytest.mark.timeout(300)


def test_prompts_over_the_budget_stop_the_run_at_step_one(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    overrides = train_overrides(
        tiny_model_dir.parent, tmp_path, rollout__max_total_tokens=8, sampling__max_new_tokens=4,
        trainer__steps=3,
    )  # fmt: skip
    trainer = build_trainer(load_config(TrainConfig, None, overrides))
    with pytest.raises(NothingGeneratedError) as err:
        trainer.train()
    msg = str(err.value)
    assert msg.startswith("step 1: none of its 4 episodes generated a token")
    assert "terminations: max_tokens 4" in msg
    assert "every one at or over rollout.max_total_tokens=8" in msg


def _group(*trajs: Trajectory) -> TrajectoryGroup:
    return TrajectoryGroup("g0", list(trajs))


def test_an_engine_that_returned_nothing_is_named_with_its_error() -> None:
    silent = Trajectory(prompt_ids=[1, 2, 3], termination="overlong")
    silent.metadata["error"] = "engine gave back 0 tokens"
    with pytest.raises(
        NothingGeneratedError,
        match=r"engine returned no tokens.*first error: engine gave back 0 tokens",
    ):
        check_generated([_group(silent, Trajectory(prompt_ids=[1]))], 4, 64, 16)


def test_infra_failures_are_not_counted() -> None:
    """A step of timeouts skips its update and the run goes on (test_infra_exclusion)."""
    timed_out = Trajectory(prompt_ids=[1, 2], termination="timeout")
    check_generated([_group(timed_out, timed_out)], 1, 8, 4)
    over = Trajectory(prompt_ids=[1] * 9, termination="max_tokens")
    with pytest.raises(NothingGeneratedError, match=r"none of its 1 episodes"):
        check_generated([_group(timed_out, over)], 1, 8, 4)


def test_one_generated_token_or_no_episodes_pass() -> None:
    spoke = Trajectory(prompt_ids=[1, 2], response_ids=[7], loss_mask=[1], logprobs=[-0.1])
    check_generated(
        [_group(Trajectory(prompt_ids=[1] * 99, termination="max_tokens"), spoke)], 1, 8, 4
    )
    check_generated([], 1, 8, 4)
