"""agentrl's calculator as a verifiers `Toolset` (an MCP server verifiers starts per rollout).

It advertises the exact schema agentrl builds for the tool (the one the tiny test agent was
fine-tuned on), the way verifiers' own Harbor toolset forwards a catalog."""

from __future__ import annotations

from typing import Any, cast

import verifiers.v1 as vf
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool

from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema

SCHEMA = build_schema(calculator)["function"]


class CalcTools(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None  # advertise `calculator` bare

    def register(self, mcp: MCPServer) -> None:
        server = cast(Any, mcp)
        server.list_tools = self.list_tools
        server.call_tool = self.call_tool

    async def list_tools(self) -> list[Tool]:
        return [
            Tool(
                name=SCHEMA["name"],
                description=SCHEMA["description"],
                inputSchema=SCHEMA["parameters"],
            )
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        try:
            text, error = str(calculator(**arguments)), False
        except Exception as e:  # noqa: BLE001 - a bad call is the model's error to see
            text, error = f"error: {e}", True
        return CallToolResult(content=[TextContent(type="text", text=text)], isError=error)


if __name__ == "__main__":
    CalcTools.run()
