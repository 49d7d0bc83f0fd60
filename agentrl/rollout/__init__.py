"""The multi-turn rollout: envs and an engine in, token-exact `TrajectoryGroup`s out."""

from agentrl.rollout.episode import run_episode
from agentrl.rollout.role import Rollout
from agentrl.rollout.runner import RolloutRunner, run_groups, sampling_params, summarize

__all__ = ["Rollout", "RolloutRunner", "run_episode", "run_groups", "sampling_params", "summarize"]
