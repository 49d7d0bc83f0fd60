"""What a training step leaves behind about its rollouts: the logged rollout metrics and,
every `trainer.dump_rollouts_every` steps, the trajectories for `agentrl view`.

Why a module of its own: both read the step's groups and batch and nothing else of the loop,
so `Trainer.train_step` calls them as plain functions and stays readable top to bottom.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentrl.types import Trajectory, TrajectoryGroup

from .batch import TrainBatch


def dumps_at(step: int, every: int) -> bool:
    """Whether step `step` dumps its rollouts (`trainer.dump_rollouts_every`)."""
    return bool(every and step % every == 0)


def dump_rollouts(
    out: Path,
    step: int,
    groups: list[TrajectoryGroup],
    batch: TrainBatch | None,
    tokenizer: str,
    left_out: Sequence[Trajectory] = (),
) -> None:
    """`out/rollouts/step_NNNNNN.jsonl`: the step's trajectories with the trainer's log-probs
    per token beside the engine's (their ratio is the rollout/train mismatch the viewer
    colours), then the episodes left out of training (`metadata["left_out"]`, no trainer
    log-probs). Needs the batch's old log-probs (the trainer computes them on dump steps);
    `batch` is None only when no group trains."""
    from agentrl.types import write_jsonl

    trajs = [t for g in groups for t in g.trajectories]
    if trajs:
        assert batch is not None and batch.old_log_probs is not None
        for i, t in enumerate(trajs):
            t.metadata["trainer_logprobs"] = batch.old_log_probs[i, : len(t.response_ids)].tolist()
    for t in [*trajs, *left_out]:
        t.metadata["tokenizer"] = tokenizer
    folder = out / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / f"step_{step:06d}.jsonl", [*trajs, *left_out])


# Trainer-side spans: the step's `time/*` measurement each one is, so TensorBoard shows the
# trainer's and the rollout's spans side by side under `span/`.
_TRAINER_SPANS = {
    "idle": "time/rollout",  # waiting for the step's groups
    "old_logprobs": "time/logprobs",  # old (and ref) log-probs, values
    "update": "time/update",
    "weight_sync": "time/weight_sync",
}


def span_metrics(m: dict[str, float]) -> dict[str, float]:
    """`span/trainer/<phase>` from the step's timings `m` (seconds per step). The rollout
    side's busy spans are the episodes' own (`span/rollout/<phase>`,
    `agentrl.rollout.runner.summarize`); its idle time is the collector's to measure
    (`SyncCollector.metrics`: the engine waits from one collect's end to the next's start)."""
    return {f"span/trainer/{name}": m[key] for name, key in _TRAINER_SPANS.items() if key in m}


def rollout_metrics(
    groups: list[TrajectoryGroup],
    batch: TrainBatch,
    stats: dict[str, float],
    success_at: float,
) -> dict[str, float]:
    """Reward, success (reward at the env's best, `success_at`), lengths, tool use and
    termination shares of the step; `stats` are the rollout's own (its first collect)."""
    trajs = [t for g in groups for t in g.trajectories]
    sampled = float(batch.response_mask.sum())
    out = {
        "reward/mean": float(batch.rewards.mean()),
        "success_rate": sum(t.reward >= success_at - 1e-9 for t in trajs) / len(trajs),
        "response_length/mean": sampled / len(trajs),
        "tool_calls": stats.get("tool_calls", 0.0),
        "tool_errors": stats.get("tool_errors", 0.0),
        "groups": float(len(groups)),
    }
    out |= {k: v for k, v in stats.items() if k.startswith("termination/")}
    if stats.get("wall_s"):
        out["throughput/rollout_tok_s"] = stats.get("sampled_tokens", 0.0) / stats["wall_s"]
    return out
