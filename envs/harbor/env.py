"""`harbor:PATH`: a Harbor task folder (or a folder of them) as a multi-turn tool env.

* Reset: a task (picked by the seed, or `options={"index": i}`); its `instruction.md` is the
  prompt, its environment the sandbox (`sandbox.py`: `local` when the Dockerfile only copies
  files into the working directory, `docker` builds the image locally).
* Tools: `bash` (a command in the working directory; files and cwd persist, processes do not),
  `read_file`, `write_file`. The tests and the solution are never in the sandbox the agent
  uses.
* End: a reply without tool calls, or `max_turns` / the task's `[agent] timeout_sec` (the
  summed wall time of its commands) spent. Then the verifier runs in a fresh sandbox on the
  final working directory (the agent's changes carried over) and its reward file is the
  episode's reward, whatever way the episode ended (Harbor grades a timed-out agent too).
* Oracle: `solution/solve.sh` (less its `#!` line) as one `bash` call, then a final message.
* `harbor:family/files-v0`: a generated task family (`family.py`) instead of a folder; the
  reset seed picks the task and its split (`split="auto"`: the trainer's held-out eval seeds,
  [heldout_from, 2 * heldout_from), pose held-out tasks, all other seeds training tasks).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from agentrl.sandboxes.workspace import ROOT, Workspace
from agentrl.tools import ToolSet, tool
from agentrl.types import Message, ToolCall

from ..core import HELDOUT_FROM, Observation, Task, ToolEnv
from ..hidden_data import HiddenData, distinctive
from . import family as families
from . import sandbox
from .tasks import HarborTask, load_tasks

_OUT = 6000
_COMMAND_TIMEOUT_S = 120.0


class HarborTools(ToolSet):
    """The agent's hands in the current task's working directory."""

    def __init__(self) -> None:
        super().__init__()
        self.ws: Workspace | None = None
        self.budget_s: float | None = None  # [agent] timeout_sec left, None: no limit

    @property
    def _ws(self) -> Workspace:
        if self.ws is None:
            raise RuntimeError("no workspace: reset() the env first")
        return self.ws

    @tool(timeout_s=_COMMAND_TIMEOUT_S + 30, max_output_chars=_OUT + 400)
    async def bash(self, command: str) -> str:
        """Run a bash command in the task's working directory (files and cwd persist).

        Args:
            command: The command line, e.g. `ls -la && cat README.md`.
        """
        if self.budget_s is not None and self.budget_s <= 0:
            return "Error: the task's time budget is spent; no more commands run."
        limit = (
            _COMMAND_TIMEOUT_S if self.budget_s is None else min(self.budget_s, _COMMAND_TIMEOUT_S)
        )
        t0 = time.monotonic()
        res = await self._ws.arun(command, limit)
        if self.budget_s is not None:
            self.budget_s -= time.monotonic() - t0
        return res.render()

    @tool(timeout_s=10.0, max_output_chars=_OUT + 400)
    def read_file(self, path: str) -> str:
        """Read a text file of the working directory.

        Args:
            path: Relative to the current directory, or absolute under /work/repo.
        """
        try:
            data = self._ws.read(path).decode("utf-8", "replace")
        except (FileNotFoundError, ValueError) as e:
            return f"Error: {type(e).__name__}: {e}"
        return data if len(data) <= _OUT else data[:_OUT] + f"\n[... cut at {_OUT} chars]"

    @tool(timeout_s=10.0)
    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a text file in the working directory.

        Args:
            path: Relative to the current directory, or absolute under /work/repo.
            content: The whole new content of the file.
        """
        try:
            self._ws.write(path, content.encode())
        except ValueError as e:
            return f"Error: {e}"
        return f"Wrote {len(content)} characters to {path}."


class HarborEnv(ToolEnv, HiddenData):
    family = "harbor"
    description = "A Harbor task folder (instruction, environment, tests writing the reward)."
    max_turns = 20
    max_observation_chars = 64_000

    def __init__(
        self,
        target: str,
        backend: str = "local",
        max_turns: int | None = None,
        tasks: list[str] | None = None,
        split: str = "auto",
        heldout_from: int = HELDOUT_FROM,
    ) -> None:
        super().__init__(HarborTools(), max_turns)
        self.target, self.backend = target, backend
        self.task_family = target[len("family/") :] if target.startswith("family/") else None
        if self.task_family is not None:
            if self.task_family not in families.FAMILIES:
                names = ", ".join(f"family/{f}" for f in families.FAMILIES)
                raise KeyError(f"harbor:{target}: no such task family; known: {names}")
            if split not in ("auto", *families.SPLITS) or tasks is not None:
                raise ValueError(
                    f"harbor:{target}: split must be auto, train or heldout (got {split!r}) "
                    "and `tasks` is for task folders"
                )
        elif split != "auto":
            raise ValueError(f"harbor:{target}: `split` is for a task family (harbor:family/...)")
        self.split, self.heldout_from = split, heldout_from
        self._seed: int | None = None
        self.dataset: list[HarborTask] = [] if self.task_family else load_tasks(target)
        if tasks is not None:
            known = {t.name for t in self.dataset}
            unknown = sorted(set(tasks) - known)
            if unknown:
                raise KeyError(f"harbor:{target}: no task {unknown}; known: {sorted(known)}")
            self.dataset = [t for t in self.dataset if t.name in tasks]
        self._envs: dict[str, sandbox.Environment] = {}
        self.current: HarborTask | None = None
        self.last_verdict: sandbox.Verdict | None = None

    @property
    def harbor(self) -> HarborTools:
        assert isinstance(self.tools, HarborTools)
        return self.tools

    def _environment(self, task: HarborTask) -> sandbox.Environment:
        if task.name not in self._envs:
            self._envs[task.name] = sandbox.build(task, self.backend)
        return self._envs[task.name]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self._seed = seed  # a family's split is the seed's (the trainer's eval seeds: held-out)
        return super().reset(seed=seed, options=options)

    def _pick(self, rng: np.random.Generator, options: dict[str, Any]) -> HarborTask:
        if self.task_family is None:
            index = options.get("index", int(rng.integers(len(self.dataset))))
            return self.dataset[index % len(self.dataset)]
        seed = self._seed if self._seed is not None else int(rng.integers(2**31))
        split = self.split
        if split == "auto":
            split = families.split_for_seed(seed, self.heldout_from)
        return families.load(seed, split, self.task_family)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        task = self._pick(rng, options)
        env = self._environment(task)
        self.current, self.last_verdict = task, None
        self.harbor.ws = Workspace(
            env.tree, env.backend, _COMMAND_TIMEOUT_S, task.memory_mb or 1024, env=env.env
        )
        self.harbor.budget_s = task.agent_timeout_s
        prompt = (
            f"{sandbox.rewrite(task.instruction, task.workdir).strip()}\n\n"
            f"(Your working directory is {ROOT}. Use the tools to work in it; reply without a "
            "tool call when you are done.)"
        )
        info = {"task": task.name, "backend": self.backend}
        if self.task_family is not None:
            info["split"] = str(task.section("metadata").get("split", ""))
        return Task([Message("user", prompt)], info=info)

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = await super().astep(action)
        spent = self.harbor.budget_s is not None and self.harbor.budget_s <= 0
        if action.tool_calls and (trunc or spent):  # graded as it stands, like Harbor does
            import asyncio

            verdict = await asyncio.to_thread(self._verify)
            return obs, verdict.reward, False, True, {**info, **self._info(verdict)}
        return obs, reward, term, trunc, info

    def _finish(self, final: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        verdict = self._verify()
        return Observation([]), verdict.reward, True, False, self._info(verdict)

    def score(self, final: Message) -> float:
        return self._verify().reward

    def _verify(self) -> sandbox.Verdict:
        task = self.current
        if task is None:
            raise RuntimeError("step() before reset()")
        env = self._environment(task)
        self.last_verdict = sandbox.verify(task, env, self.harbor._ws.files())
        return self.last_verdict

    @staticmethod
    def _info(v: sandbox.Verdict) -> dict[str, Any]:
        info: dict[str, Any] = {"rewards": v.rewards, "tests_exit_code": v.exit_code}
        if v.error:
            info["error"] = v.error
        return info

    def hidden_data(self) -> list[str]:
        """The task's tests and solution, less what its instruction and files show."""
        task = self.current
        assert task is not None and self.task is not None, "reset() first"
        hidden = [
            d.decode("utf-8", "replace") for d in [*task.tests.values(), *task.solution.values()]
        ]
        shown = [d.decode("utf-8", "replace") for d in self.harbor._ws.files().values()]
        return distinctive(hidden, [self.task.messages[0].content, *shown])

    def oracle_action(self) -> Message | None:
        task = self.current
        if task is None:
            return None
        solve = task.solution.get("solve.sh")
        if solve is None:
            return None
        if self.turn == 0:
            text = solve.decode()
            if text.startswith("#!"):  # a comment to bash -c; the demo is the command alone
                text = text.partition("\n")[2]
            if text.count("\n") == 1:  # one command: no trailing newline in the demo
                text = text.rstrip("\n")
            command = sandbox.rewrite(text, task.workdir)
            call = ToolCall("bash", {"command": command}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", "Done.")

    def adversaries(self) -> dict[str, list[Message]]:
        return {"no-op": [Message("assistant", "Done.")]}
