"""OpenEnv environments (`openenv-core`) as agentrl envs: `openenv:my_pkg.server:MyEnvironment`.

An OpenEnv `Environment` is the server half of an OpenEnv env: `reset()` and `step(Action)`
return an `Observation` carrying `reward` (usually from the env's `rubric`) and `done`. It is
run here in-process, with no HTTP server or container in between:

* Tools: an `MCPEnvironment` lists its MCP tools (`ListToolsAction`) and each call becomes a
  `CallToolAction`; any other env gets one tool, `act`, whose parameters are its `Action`
  class's pydantic fields (the class is found from `Environment[Action, ...]`, or given as
  `action_type=`). Arguments are validated by that model; a bad one is an error observation.
* Observation: the fields besides `done`/`reward`/`metadata`, as text (a lone string field as
  is, else JSON), in the tool message.
* Reward: the sum of the observations' `reward` over the turn; `done` terminates. A reply with
  no tool call costs the turn and gets a reminder.

A running OpenEnv server (`openenv:http://127.0.0.1:8000`, e.g. a container started with its
image) is reached with openenv's own `GenericEnvClient` (WebSocket): the `act` tool's
parameters come from the server's `/schema`, and an action the server rejects is an error
observation. Remote `MCPEnvironment`s (openenv's "production" mode) are not wrapped.
"""

from __future__ import annotations

import importlib
import json
import typing
from typing import Any

from agentrl.types import Message, ToolCall

from ..core import AgentEnv, Observation

_HIDDEN = {"done", "reward", "metadata"}


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"openenv:{target}: expected 'module:EnvironmentClass'")
    return getattr(importlib.import_module(module), attr)


def _action_type(cls: type) -> type:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action

    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Environment or (
                isinstance(typing.get_origin(base), type)
                and issubclass(typing.get_origin(base), Environment)
            ):
                args = typing.get_args(base)
                if args and isinstance(args[0], type) and issubclass(args[0], Action):
                    return args[0]
    raise TypeError(
        f"{cls.__name__}: cannot tell its Action class from Environment[...]; pass action_type="
    )


class OpenEnvEnv(AgentEnv):
    family = "openenv"
    description = "An OpenEnv Environment run in-process; its actions are tools."
    max_turns = 16

    def __init__(
        self,
        target: str | Any,
        action_type: type | None = None,
        instructions: str = "Act in the environment by calling its tools.",
        reward_range: tuple[float, float] = (0.0, 1.0),
        max_turns: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.mcp_environment import MCPEnvironment

        self.instructions, self.reward_range = instructions, reward_range
        if max_turns is not None:
            self.max_turns = max_turns
        self.turn, self.done, self.client, self.is_mcp = 0, False, None, False
        if isinstance(target, str) and target.startswith(("http://", "https://")):
            self._connect(target.rstrip("/"), **env_kwargs)
            return
        made = _load(target) if isinstance(target, str) else target
        self.env = made(**env_kwargs) if isinstance(made, type) else made
        if not isinstance(self.env, Environment):
            raise TypeError(f"openenv:{target}: {type(self.env).__name__} is not an Environment")
        self.is_mcp = isinstance(self.env, MCPEnvironment)
        self.action_type = None if self.is_mcp else action_type or _action_type(type(self.env))
        self.tools = self._tools()

    def _connect(self, url: str, timeout_s: float = 60.0) -> None:
        """A running server: its action schema from `/schema`, a sync client over its `/ws`."""
        import httpx
        from openenv.core import GenericEnvClient

        schema = httpx.get(f"{url}/schema", timeout=timeout_s).raise_for_status().json()
        self.tools = [_act_schema(schema["action"], schema["action"].get("title", "action"))]
        client = GenericEnvClient(base_url=url, message_timeout_s=timeout_s)
        self.client = client.sync()

    def _tools(self) -> list[dict[str, Any]]:
        if self.is_mcp:
            from openenv.core.env_server.mcp_types import ListToolsAction

            listed = self.env.step(ListToolsAction()).tools
            return [_schema(t.name, t.description, t.input_schema) for t in listed]
        assert self.action_type is not None
        model: Any = self.action_type  # a pydantic model class
        return [_act_schema(model.model_json_schema(), model.__name__)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if self.client is not None:
            result = self.client.reset(seed=seed, **(options or {}))
            fields, self.done, meta = dict(result.observation), bool(result.done), {}
            fields = {k: v for k, v in fields.items() if k not in _HIDDEN}
        else:
            obs = self.env.reset(seed=seed, **(options or {}))
            fields, self.done = obs.model_dump(mode="json", exclude=_HIDDEN), bool(obs.done)
            meta = dict(obs.metadata)
        self.turn = 0
        text = f"{self.instructions}\n\n{_text(fields)}".strip()
        return Observation([Message("user", text)], list(self.tools)), meta

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.turn += 1
        replies, reward, errors = [], 0.0, 0
        for call in action.tool_calls:
            if self.done:
                text, errors = "Error: the episode already ended; this call was not run", errors + 1
            else:
                text, r, ok = self._run(call)
                reward, errors = reward + r, errors + (not ok)
            replies.append(Message("tool", text, tool_call_id=call.id or None, name=call.name))
        if not action.tool_calls:
            names = ", ".join(t["function"]["name"] for t in self.tools)
            replies = [Message("user", f"No action taken: call one of the tools ({names}).")]
        truncated = not self.done and self.turn >= self.max_turns
        return Observation(replies), reward, self.done, truncated, {"tool_errors": errors}

    def _run(self, call: ToolCall) -> tuple[str, float, bool]:
        """One call as an OpenEnv action: (observation text, reward, ran without error)."""
        from pydantic import ValidationError

        if call.parse_error:
            return f"Error: could not parse tool call: {call.parse_error}", 0.0, False
        names = [t["function"]["name"] for t in self.tools]
        if call.name not in names:
            return f"Error: unknown tool {call.name!r}; available: {', '.join(names)}", 0.0, False
        if self.client is not None:
            return self._run_remote(call)
        try:
            if self.is_mcp:
                from openenv.core.env_server.mcp_types import CallToolAction

                act: Any = CallToolAction(tool_name=call.name, arguments=call.arguments)
            else:
                assert self.action_type is not None
                act = self.action_type(**call.arguments)
        except ValidationError as e:
            return f"Error: invalid arguments for {call.name!r}: {e}", 0.0, False
        try:
            obs = self.env.step(act)
        except Exception as e:  # noqa: BLE001 - a failing step is shown to the model
            return f"Error: {type(e).__name__}: {e}", 0.0, False
        self.done = bool(obs.done)
        reward = float(obs.reward or 0.0)
        if self.is_mcp:
            if obs.error is not None:
                return f"Error: {obs.error.message}", reward, False
            text, failed = _mcp_result(obs.model_dump(mode="json")["result"])
            return (f"Error: {text}" if failed else text), reward, not failed
        return _text(obs.model_dump(mode="json", exclude=_HIDDEN)), reward, True

    def _run_remote(self, call: ToolCall) -> tuple[str, float, bool]:
        assert self.client is not None
        try:
            result = self.client.step(dict(call.arguments))
        except Exception as e:  # noqa: BLE001 - the server's rejection is shown to the model
            return f"Error: {e}", 0.0, False
        self.done = bool(result.done)
        fields = {k: v for k, v in dict(result.observation).items() if k not in _HIDDEN}
        return _text(fields), float(result.reward or 0.0), True

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        else:
            self.env.close()


def _schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": {}, **parameters}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


def _mcp_result(result: Any) -> tuple[str, bool]:
    """An MCP tool result (as JSON) as text, and whether the tool reported an error."""
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [c.get("text", "") for c in result["content"] if c.get("type") == "text"]
        return "\n".join(texts), bool(result.get("is_error") or result.get("isError"))
    return (result if isinstance(result, str) else json.dumps(result, default=str)), False


def _act_schema(params: dict[str, Any], name: str) -> dict[str, Any]:
    """An Action's JSON schema as the `act` tool (its `metadata` field is not the model's)."""
    params = dict(params)
    params["properties"] = {
        k: v for k, v in params.get("properties", {}).items() if k not in _HIDDEN
    }
    params["required"] = [r for r in params.get("required", []) if r not in _HIDDEN]
    doc = str(params.pop("description", "") or "").strip().split("\n\n")[0]
    return _schema("act", doc or f"Take one {name}.", params)


def _text(fields: dict[str, Any]) -> str:
    """An observation's own fields as text: a lone string as is, else JSON."""
    if len(fields) == 1:
        (value,) = fields.values()
        if isinstance(value, str):
            return value
    return json.dumps(fields, default=str)
