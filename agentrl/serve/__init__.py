"""OpenAI-compatible proxy that records token-exact trajectories of black-box agents."""

from agentrl.serve.app import create_app
from agentrl.serve.recorder import Session, SessionRecorder

__all__ = ["Session", "SessionRecorder", "create_app"]
