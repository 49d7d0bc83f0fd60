"""An OpenEnv MCPEnvironment (tools on a FastMCP server), written with openenv-core's API."""

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State


class CounterEnv(MCPEnvironment):
    def __init__(self):
        mcp = FastMCP("counter")
        self.total = 0

        @mcp.tool()
        def add(n: int) -> int:
            """Add n to the counter."""
            self.total += n
            return self.total

        super().__init__(mcp)
        self._state = State(episode_id="0", step_count=0)

    def reset(self, seed=None, episode_id=None, **kw):
        self.total = 0
        return Observation(metadata={"goal": 10})

    def _step_impl(self, action, timeout_s=None, **kw):
        return Observation(metadata={"error": "unknown action"})

    @property
    def state(self):
        return self._state
