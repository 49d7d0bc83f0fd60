"""agentrl: reinforcement learning for LLM agents that call tools over many turns."""

from agentrl.types import (
    Message,
    ToolCall,
    ToolResult,
    Trajectory,
    TrajectoryGroup,
    Turn,
    read_jsonl,
    write_jsonl,
)

__version__ = "0.1.0"


def make(id: str, **kwargs):  # noqa: ANN201 - returns the registered env's type
    """Build a registered env by id (see `agentrl.envs.make`)."""
    from agentrl.envs import make as _make

    return _make(id, **kwargs)


__all__ = [
    "Message",
    "ToolCall",
    "ToolResult",
    "Trajectory",
    "TrajectoryGroup",
    "Turn",
    "make",
    "read_jsonl",
    "write_jsonl",
]
