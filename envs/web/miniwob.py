"""`web/<task>-v0`: MiniWoB++ web tasks in real headless Chromium.

* Observation: the task utterance ("Click on the "Okay" button.") and the page as an indented
  element list, `[ref] tag#id 'text' value=... checked=...`; after each action, a user
  message with the updated page (plus a PIL screenshot of the task area in `images` when
  `screenshot=True`, for VLMs).
* Tools: `click(ref)`, `type(ref, text)`, `press(key)`, `scroll(direction, ref?)`; several
  calls in one message run in order, and stop early once the task has ended.
* Reward: MiniWoB's own raw reward from the page's JS (`WOB_RAW_REWARD_GLOBAL`), in [-1, 1]
  (1 success, -1 failure, partial for some tasks); no time discount, since model latency is
  not the agent's skill. A message without a tool call gives up: -1. Truncation: -1.
* Termination: the page ends the episode (`WOB_DONE_GLOBAL`), or the model stops calling
  tools; `max_turns` truncates.
* Difficulty: the `task` itself (any of MiniWoB's ~125 pages, e.g.
  `make("web/click-test-v0", task="choose-list")`; only registered ones have oracles);
  `max_turns`.
* Oracle: `oracles.py` reads the utterance and DOM and issues one correct action per turn.

Browsers come from `agentrl.tools.browser.shared_pool()` (or `pool=`): an env holds one from
its first reset until `close()`, which returns it to the pool; the pool quits them at exit.
"""

from __future__ import annotations

from typing import Any

from agentrl.tools.browser import BrowserPool, require_chromium, shared_pool
from agentrl.types import Message, ToolCall

from ..core import AgentEnv, Observation
from .oracles import ORACLES
from .page import TaskPage, html_dir, render
from .tools import WebTools

INSTRUCTIONS = (
    "You are operating a web page in a browser. Complete the task below using the tools; "
    "elements are named by the number in brackets. The episode ends when the page reports "
    "success or failure. Replying without a tool call gives up."
)


class MiniWoBEnv(AgentEnv):
    family = "web"
    description = "MiniWoB++ task in headless Chromium; DOM observations, click/type tools."
    reward_range = (-1.0, 1.0)
    max_turns = 10

    def __init__(
        self,
        task: str = "click-test",
        screenshot: bool = False,
        max_turns: int | None = None,
        pool: BrowserPool | None = None,
    ) -> None:
        require_chromium()
        if not (html_dir() / f"{task}.html").exists():
            raise ValueError(f"unknown MiniWoB task {task!r}; see {html_dir()}")
        self.task, self.screenshot = task, screenshot
        if max_turns is not None:
            self.max_turns = max_turns
        self.pool = pool or shared_pool()
        self.tools = WebTools()
        self.page: TaskPage | None = None
        self.turn = 0
        self._plan: list[ToolCall] | None = None
        self._utterance = ""

    # -- gym API ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if self.page is None:
            self.page = TaskPage(self.pool.acquire(), self.task)
            self.tools.page = self.page
        self.page.start(int(self.np_random.integers(2**31 - 1)))
        self.turn, self._plan = 0, None
        self._utterance = self.page.utterance()
        prompt = f"{INSTRUCTIONS}\n\nTask: {self._utterance}\n\n{self._view_text()}"
        obs = Observation([self._with_image(Message("user", prompt))], self.tools.schemas)
        return obs, {"task": self.task, "utterance": self._utterance}

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self.page is None:
            raise RuntimeError("step() before reset()")
        self.turn += 1
        if not action.tool_calls:
            return Observation([]), -1.0, True, False, {"gave_up": True}
        messages, status, errors = [], None, 0
        for call in action.tool_calls:
            if status is not None and status.done:
                messages.append(_tool_msg(call, "Not run: the task already ended."))
                continue
            result = self.tools.call(call)
            errors += result.is_error
            messages.append(_tool_msg(call, result.content))
            status = self.page.status()
        info: dict[str, Any] = {"tool_errors": errors}
        if status is not None and status.done:
            info["reason"] = status.reason
            return Observation(messages), status.reward, True, False, info
        truncated = self.turn >= self.max_turns
        messages.append(self._with_image(Message("user", self._view_text())))
        return Observation(messages), -1.0 if truncated else 0.0, False, truncated, info

    def oracle_action(self) -> Message | None:
        if self.page is None or self.task not in ORACLES:
            return None
        if self._plan is None:
            self._plan = ORACLES[self.task](self._utterance, self.page.dom())
        if self.turn >= len(self._plan):
            return None
        call = self._plan[self.turn]
        return Message("assistant", "", tool_calls=[ToolCall(call.name, call.arguments, "o")])

    def close(self) -> None:
        """Give the browser back to the pool (the pool, not the env, quits browsers)."""
        if self.page is not None:
            self.pool.release(self.page.browser)
            self.page = self.tools.page = None

    def __del__(self) -> None:  # an env dropped without close() must not pin a pooled browser
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    # -- helpers ---------------------------------------------------------------------------
    def _view_text(self) -> str:
        assert self.page is not None
        return "Page (refs in brackets):\n" + render(self.page.dom())

    def _with_image(self, msg: Message) -> Message:
        if self.screenshot and self.page is not None:
            msg.images.append(self.page.screenshot())
        return msg


def _tool_msg(call: ToolCall, content: str) -> Message:
    return Message("tool", content, tool_call_id=call.id or None, name=call.name)
