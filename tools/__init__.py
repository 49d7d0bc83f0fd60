"""Tools the model can call: declare with `@tool`, group with `ToolSet`."""

from .core import ToolSet, ToolSpec, build_schema, tool

__all__ = ["ToolSet", "ToolSpec", "build_schema", "tool"]
