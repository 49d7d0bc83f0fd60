"""OpenReward (ORS) environments (`openreward` package) as agentrl envs: `ors:module:Class`.

An ORS `Environment` class lists splits (`Split(name, type)`, type train/validation/test) and
the tasks of each (JSON objects); an instance is one session on one task: `setup()`, a prompt
(`get_prompt()` blocks or `get_messages()`), `@tool` methods taking one pydantic model and
returning `ToolOutput(blocks, reward, finished)`, `teardown()`. Here:

* Splits: `split="train"` or `"eval"` pick the split whose type is train, or the first
  validation/test one; a split name picks that split. `split="auto"` (the default) follows
  the trainer's seeds, as `harbor:family/...` does: its held-out eval seeds, [heldout_from,
  2 * heldout_from) (`data.eval_seed_offset` up), pose tasks of the eval split, every other
  seed (training, SFT demos) tasks of the train split; an env without an eval split uses its
  train split for both. Reset picks a task by the seed (or `options={"index": i}`) and builds
  a fresh instance on it.
* Tools: the class's `list_tools()` and the instance's `list_task_tools()` become OpenAI tool
  schemas (their pydantic JSON schemas); a call runs through the SDK's own dispatcher
  (`Environment._call_tool`, which its server uses), so validation, locks and the
  episode-finished latch are the SDK's. Text blocks are the tool message; an error is an
  error observation.
* Rewards: the sum of a turn's `ToolOutput.reward`s is the step's reward (the episode's reward
  is their sum); `finished` terminates. A reply without tool calls goes to the env's
  `@terminal` tool when it has one (its output ends the episode), else ends the episode with
  nothing more earned.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any, cast

from agentrl.tools.core import run_sync
from agentrl.types import Message

from ..core import HELDOUT_FROM, AgentEnv, Observation, is_heldout_seed

BUNDLED = {"arith": "agentrl.envs.interop.ors_example:ArithEnvironment"}


def _await(value: Any) -> Any:
    return run_sync(value) if asyncio.iscoroutine(value) or asyncio.isfuture(value) else value


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) or asyncio.isfuture(value) else value


def _text(blocks: Any) -> str:
    parts = []
    for b in blocks or []:
        parts.append(b.text if getattr(b, "type", "") == "text" else f"[{b.type} block]")
    return "\n".join(parts)


class ORSEnv(AgentEnv):
    family = "ors"
    description = "An OpenReward environment: its tools, rewards and finished flag."
    max_turns = 16

    def __init__(
        self,
        target: str,
        split: str = "auto",
        secrets: dict[str, str] | None = None,
        max_turns: int | None = None,
        reward_range: tuple[float, float] = (0.0, 1.0),
        heldout_from: int = HELDOUT_FROM,
    ) -> None:
        from openreward.environments import Environment

        entry = BUNDLED.get(target, target)
        module, _, attr = entry.partition(":")
        if not attr:
            raise ValueError(
                f"ors:{target}: expected 'module:EnvironmentClass' or {sorted(BUNDLED)}"
            )
        found = getattr(importlib.import_module(module), attr)
        if not (isinstance(found, type) and issubclass(found, Environment)):
            raise TypeError(f"ors:{target}: {found!r} is not an openreward Environment class")
        self.env_class: Any = cast(Any, found)  # an openreward Environment subclass
        self.target, self.secrets = target, dict(secrets or {})
        self.auto: tuple[str, str] | None = None  # (train split, eval split) for "auto"
        if split == "auto":
            train = self._split("train")
            try:
                heldout = self._split("eval")
            except KeyError:  # no validation/test split: held-out seeds draw training tasks
                heldout = train
            self.auto = (train, heldout)
        else:
            train = self._split(split)
        self.heldout_from = heldout_from
        self._tasks = {name: self._list(name) for name in dict.fromkeys(self.auto or (train,))}
        self.split, self.tasks = train, self._tasks[train]
        if max_turns is not None:
            self.max_turns = max_turns
        self.reward_range = reward_range
        self.instance: Any = None
        self.turn = 0

    def _split(self, wanted: str) -> str:
        splits = [
            (s, s) if isinstance(s, str) else (s.name, s.type) for s in self.env_class.list_splits()
        ]
        names = [n for n, _ in splits]
        if wanted in names:
            return wanted
        kinds = {"train": ("train",), "eval": ("validation", "test")}.get(wanted)
        for kind in kinds or ():
            for name, typ in splits:
                if typ == kind:
                    return name
        raise KeyError(f"ors:{self.target}: no split {wanted!r}; it has {names}")

    def _list(self, split: str) -> list[Any]:
        tasks = list(_await(self.env_class.list_tasks(split)))
        if not tasks:
            raise ValueError(f"ors:{self.target}: split {split!r} has no tasks")
        return tasks

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self.close()
        if self.auto is not None:
            heldout = is_heldout_seed(seed, self.heldout_from)
            self.split = self.auto[1] if heldout else self.auto[0]
            self.tasks = self._tasks[self.split]
        options = options or {}
        index = int(options.get("index", int(self.np_random.integers(len(self.tasks)))))
        spec = self.tasks[index % len(self.tasks)]
        self.instance = self.env_class(task_spec=spec, secrets=self.secrets)
        _await(self.instance.setup())
        messages = [Message(m.role, _text(m.blocks)) for m in _await(self.instance.get_messages())]
        listed = [*self.env_class.list_tools().tools, *self.instance.list_task_tools().tools]
        schemas = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.input_schema or {"type": "object", "properties": {}}),
                },
            }
            for t in listed
        ]
        self.turn = 0
        return Observation(messages, schemas), {"split": self.split, "task_index": index}

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        return run_sync(self.astep(action))

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.instance is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        if not action.tool_calls:
            if self.env_class.terminal_tool() is None:
                return Observation([]), 0.0, True, False, {"ended": "reply without a tool call"}
            out = (await self.instance.call_terminal_tool(action.content or "")).root
            reward, _, text, info = self._absorb(out)
            return Observation([]), reward, True, False, {**info, "terminal": text}
        messages: list[Message] = []
        infos: list[dict[str, Any]] = []
        reward, finished = 0.0, False
        for call in action.tool_calls:
            if call.parse_error:
                text, r, done, info = f"Error: {call.parse_error}", 0.0, False, {"error": "parse"}
            else:
                out = (await self.instance._call_tool(call.name, dict(call.arguments or {}))).root
                r, done, text, info = self._absorb(out)
            messages.append(Message("tool", text, tool_call_id=call.id or None, name=call.name))
            reward, finished, infos = reward + r, finished or done, [*infos, info]
        truncated = not finished and self.turn >= self.max_turns
        return Observation(messages), reward, finished, truncated, {"tool_outputs": infos}

    @staticmethod
    def _absorb(out: Any) -> tuple[float, bool, str, dict[str, Any]]:
        """(reward, finished, text, info) of one RunToolOutput's root."""
        if not out.ok:
            return 0.0, False, f"Error: {out.error}", {"error": out.reason or "tool_error"}
        result = out.output
        meta = json.loads(json.dumps(result.metadata, default=str)) if result.metadata else {}
        text = _text(result.blocks) or "[no output]"
        return float(result.reward or 0.0), bool(result.finished), text, {"metadata": meta}

    def close(self) -> None:
        if self.instance is not None:
            instance, self.instance = self.instance, None
            _await(instance.teardown())
