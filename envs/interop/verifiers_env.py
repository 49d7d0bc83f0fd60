"""verifiers tasksets (`verifiers==0.4.0`, its `verifiers.v1` API) as agentrl envs.

    verifiers:my_pkg.tasks:MyTaskset     # a vf.Taskset subclass, instance or factory (or a
                                          # vf.Env, whose taskset is used)
    verifiers:textarena                   # a taskset id verifiers resolves (built-in/installed)

verifiers 0.4 splits an environment into a `Taskset` (tasks: prompt, system prompt, data;
`@vf.reward` / `@vf.metric` functions and judges; `Toolset` MCP tool servers) and a harness
that plays it. Here agentrl's policy is the player, so the adapter takes the taskset:

* reset: a task picked by the seed (or `options={"idx": i}`); its system prompt and prompt are
  the first messages. The tools of its toolsets (the task's, launched per episode, and the
  taskset's, shared) are served in-process by the `mcp` SDK and called through `MCPTools`,
  with the same validation, timeouts and error observations as any agentrl tool.
* step: tool calls run; a reply without tool calls ends the episode, and so does
  `max_turns`. The conversation is then written as a verifiers `Trace` and scored by the
  task's own `score()`: rewards (weighted, summed as verifiers sums them) are the episode's
  reward; every named reward and metric is in `info`.

Not covered: tasksets whose `Env.run` drives the conversation itself (user simulators, the
TextArena taskset's game engine), tasks that need a container runtime (`NEEDS_CONTAINER`),
and toolsets with custom `State` (verifiers syncs it over an HTTP channel its own runner
serves). These raise or are documented where they are met.
"""

from __future__ import annotations

import importlib
import itertools
import json
from typing import Any

from agentrl.tools.core import ToolSet, run_sync
from agentrl.types import Message

from ..core import AgentEnv, Observation, tool_message


def _taskset(target: str | Any, config: dict[str, Any]) -> Any:
    import verifiers.v1 as vf
    from verifiers.v1.utils.generic import concrete_type
    from verifiers.v1.utils.loaders import taskset_class

    if isinstance(target, str):
        if ":" in target:
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
        else:
            target = taskset_class(target)
    if isinstance(target, vf.Env):  # its taskset; agentrl's policy plays the agent's part
        return target.taskset
    if isinstance(target, vf.Taskset):
        return target
    if isinstance(target, type) and issubclass(target, vf.Taskset):
        cfg_type = concrete_type(target, vf.TasksetConfig) or vf.TasksetConfig
        return target(cfg_type(**config))
    if callable(target):
        made = target(**config)
        if isinstance(made, vf.Env):
            return made.taskset
        if isinstance(made, vf.Taskset):
            return made
        raise TypeError(f"verifiers factory returned {type(made).__name__}, not a vf.Taskset")
    raise TypeError(f"{target!r} is not a verifiers Taskset, Taskset class or factory")


class VerifiersEnv(AgentEnv):
    family = "verifiers"
    description = "A verifiers taskset: its prompts, toolsets and reward functions."
    max_turns = 10

    def __init__(
        self,
        target: str | Any,
        reward_range: tuple[float, float] = (0.0, 1.0),
        max_turns: int | None = None,
        max_tasks: int = 10_000,
        tool_timeout_s: float = 30.0,
        **config: Any,
    ) -> None:
        self.taskset = _taskset(target, config)
        self.max_tasks, self.tool_timeout_s = max_tasks, tool_timeout_s
        self.reward_range = reward_range
        if max_turns is not None:
            self.max_turns = max_turns
        self._tasks: list[Any] | None = None
        self._shared: list[ToolSet] | None = None
        self._episode_tools: list[ToolSet] = []
        self.task: Any = None
        self.history: list[Message] = []
        self.turn = 0

    # -- tasks and tools ---------------------------------------------------------------
    @property
    def tasks(self) -> list[Any]:
        if self._tasks is None:
            source = self.taskset if self.taskset.bounded else self.taskset.take(self.max_tasks)
            self._tasks = list(itertools.islice(source, self.max_tasks))
            if not self._tasks:
                raise ValueError(f"verifiers taskset {type(self.taskset).__name__} has no tasks")
        return self._tasks

    def _serve(self, toolsets: list[Any], task: Any) -> list[ToolSet]:
        from mcp.server.mcpserver import MCPServer

        from agentrl.tools.mcp_tools import MCPTools

        served: list[ToolSet] = []
        for ts in toolsets:
            run_sync(ts.setup())
            if task is not None:
                run_sync(ts.setup_task(task))
            server = MCPServer(ts.server_name or type(ts).__name__)
            ts.register(server)
            prefix = f"{ts.server_name}_" if ts.server_name else ""
            served.append(MCPTools(server=server, timeout_s=self.tool_timeout_s, prefix=prefix))
        return served

    def _tools(self) -> dict[str, ToolSet]:
        by_name: dict[str, ToolSet] = {}
        for ts in [*(self._shared or []), *self._episode_tools]:
            for name in ts.names:
                if name in by_name:
                    raise ValueError(f"verifiers toolsets define tool {name!r} twice")
                by_name[name] = ts
        return by_name

    # -- gym API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        tasks = self.tasks
        idx = (options or {}).get("idx")
        self.task = tasks[int(idx) if idx is not None else int(self.np_random.integers(len(tasks)))]
        if type(self.task).NEEDS_CONTAINER:
            raise NotImplementedError(
                f"verifiers task {type(self.task).__name__} needs a container runtime, which "
                "this adapter does not start"
            )
        if self._shared is None:
            self._shared = self._serve(type(self.taskset).toolsets(self.taskset.config), None)
        self._close_episode_tools()
        self._episode_tools = self._serve(type(self.task).toolsets(self.task.config), self.task)
        data = self.task.data
        self.history = [Message("system", data.system_prompt)] if data.system_prompt else []
        if isinstance(data.prompt, str):
            self.history.append(Message("user", data.prompt))
        else:
            for m in data.prompt or []:
                self.history.append(Message(m.role, _text(m.content)))
        self.turn = 0
        schemas = [s for ts in self._tools().values() for s in ts.schemas]
        schemas = list({s["function"]["name"]: s for s in schemas}.values())
        info = {"task_idx": data.idx, "task_name": data.name}
        return Observation(list(self.history), schemas), info

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        self.history.append(action)
        if not action.tool_calls:
            return self._score(Observation([]), truncated=False)
        tools = self._tools()
        results = []
        for call in action.tool_calls:
            ts = tools.get(call.name)
            if ts is None:  # the ToolSet's own unknown-tool error, naming every tool
                ts = next(iter(tools.values()), ToolSet())
            results.append(ts.call(call))
        replies = [tool_message(r) for r in results]
        self.history += replies
        if self.turn >= self.max_turns:
            return self._score(Observation(replies), truncated=True)
        info = {"tool_errors": sum(r.is_error for r in results)}
        return Observation(replies), 0.0, False, False, info

    def _score(
        self, obs: Observation, truncated: bool
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        trace = _trace(self.task, self.history, truncated)
        run_sync(self.task.score(trace))
        rewards = {k: (None if r is None else r.value) for k, r in trace.rewards.items()}
        info = {"rewards": rewards, "metrics": dict(trace.metrics)}
        return obs, float(trace.reward), not truncated, truncated, info

    def _close_episode_tools(self) -> None:
        for ts in self._episode_tools:
            ts.close()
        self._episode_tools = []

    def close(self) -> None:
        self._close_episode_tools()
        for ts in self._shared or []:
            ts.close()
        self._shared = None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content or [])


def _trace(task: Any, history: list[Message], truncated: bool) -> Any:
    """The conversation as the verifiers `Trace` its scoring functions read."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import (
        AssistantMessage,
        SystemMessage,
        ToolCall,
        ToolMessage,
        UserMessage,
    )

    nodes = []
    for i, m in enumerate(history):
        if m.role == "system":
            msg: Any = SystemMessage(content=m.content)
        elif m.role == "user":
            msg = UserMessage(content=m.content)
        elif m.role == "tool":
            msg = ToolMessage(tool_call_id=m.tool_call_id or "", content=m.content, name=m.name)
        else:
            calls = [
                ToolCall(id=c.id or f"call_{i}_{j}", name=c.name, arguments=json.dumps(c.arguments))
                for j, c in enumerate(m.tool_calls)
            ]
            msg = AssistantMessage(content=m.content, tool_calls=calls or None)
        nodes.append(
            MessageNode(parent=i - 1 if i else None, message=msg, sampled=m.role == "assistant")
        )
    trace = Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
    )
    trace.is_completed, trace.ok = True, True
    if truncated:
        trace.stop("max_turns")
    return trace
