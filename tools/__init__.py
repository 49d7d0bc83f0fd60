"""Tools the model can call: declare with `@tool`, group with `ToolSet`."""

from .core import ToolError, ToolSet, ToolSpec, build_schema, tool

__all__ = ["ToolError", "ToolSet", "ToolSpec", "build_schema", "tool"]
