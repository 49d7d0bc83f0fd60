"""A deliberately broken env for doctor tests: its schema advertises `calculater` (typo) while
the implemented tool is `calculator`, so every call the model (or oracle) makes fails."""

from __future__ import annotations

import copy
from typing import Any

from agentrl.envs import register
from agentrl.envs.math.calc import CalcEnv
from agentrl.types import Message, ToolCall


class TypoCalcEnv(CalcEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        obs.tools = copy.deepcopy(obs.tools)
        for schema in obs.tools:
            schema["function"]["name"] = "calculater"
        return obs, info

    def oracle_action(self) -> Message | None:
        action = super().oracle_action()
        if action is not None and action.tool_calls:
            c = action.tool_calls[0]
            action.tool_calls = [ToolCall("calculater", c.arguments, id=c.id)]
        return action


register("doctortest/calc-typo-v0", TypoCalcEnv, description="tool name typo", n_operands=2)
