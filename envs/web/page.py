"""A MiniWoB++ task page in a pooled Chromium, and its DOM as text the model can read.

MiniWoB++ tasks are static HTML files shipped in the `miniwob` package; each defines
`genProblem()` and reports its result through `core.endEpisode(reward)`, which sets the
`WOB_DONE_GLOBAL` / `WOB_RAW_REWARD_GLOBAL` globals we poll. `core.getDOMInfo()` numbers
every visible element with a `ref` (stable within an episode) that the tools act on.

Two deliberate departures from MiniWoB's own Python driver:
* the 10 s episode timer is pushed out to ~24 days, since an LLM turn can take longer than
  a whole MiniWoB episode; and we read the *raw* reward, not the time-discounted one;
* problems are seeded from the env's numpy RNG via `Math.seedrandom`, so `reset(seed=s)`
  always shows the same page.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.tools.browser import Browser, BrowserUnavailable

_NO_TIMER_MS = 2**31 - 1  # setTimeout's maximum; larger values fire immediately
TASK_W, TASK_H = 160, 210  # MiniWoB's task area, top-left of the page
MAX_DOM_CHARS = 12_000


def html_dir() -> Path:
    """Where the `miniwob` package keeps its task pages."""
    try:
        import miniwob
    except ImportError as e:
        raise BrowserUnavailable("web envs need MiniWoB++: pip install 'agentrl[web]'") from e
    return Path(miniwob.__file__).parent / "html" / "miniwob"


@dataclass
class Node:
    """One element (or text run, `ref=None`) of the task's DOM."""

    ref: int | None
    tag: str
    text: str = ""
    value: Any = None
    id: str = ""
    classes: str = ""
    focused: bool = False
    depth: int = 0
    children: list[Node] = field(default_factory=list)

    def flat(self) -> list[Node]:
        return [self, *(n for c in self.children for n in c.flat())]

    def line(self) -> str:
        head = f"[{self.ref}] " if self.ref is not None else ""
        name = self.tag + (f"#{self.id}" if self.id else "")
        name += "".join(f".{c}" for c in self.classes.split() if not c.startswith("ui-"))
        parts = [head + name if self.ref is not None else "text"]
        if self.text:
            parts.append(repr(self.text))
        if isinstance(self.value, bool):
            parts.append(f"checked={str(self.value).lower()}")
        elif self.value is not None:
            parts.append(f"value={self.value!r}")
        if self.focused:
            parts.append("(focused)")
        return "  " * self.depth + " ".join(p for p in parts if p)


def parse_dom(info: dict[str, Any], depth: int = 0) -> Node:
    ref = info.get("ref")
    tag = str(info.get("tag", "")).lower()
    node = Node(
        ref=ref if isinstance(ref, int) and ref > 0 else None,
        tag=tag,
        text=str(info.get("text") or "").strip(),
        value=info.get("value"),
        id=str(info.get("id") or ""),
        classes=str(info.get("classes") or ""),
        focused=bool(info.get("focused")),
        depth=depth,
    )
    node.children = [parse_dom(c, depth + 1) for c in info.get("children", [])]
    return node


def render(root: Node) -> str:
    """Indented one-element-per-line view; refs in brackets are what the tools take."""
    text = "\n".join(n.line() for n in root.flat())
    if len(text) > MAX_DOM_CHARS:
        text = text[:MAX_DOM_CHARS] + "\n... [page truncated]"
    return text


@dataclass
class Status:
    done: bool
    reward: float
    reason: str | None


class TaskPage:
    """One MiniWoB task open in one browser. Every method holds the browser's lock."""

    def __init__(self, browser: Browser, task: str) -> None:
        path = html_dir() / f"{task}.html"
        if not path.exists():
            raise ValueError(f"unknown MiniWoB task {task!r} (no {path.name} in {path.parent})")
        self.browser, self.task, self.url = browser, task, path.as_uri()

    @property
    def driver(self) -> Any:
        return self.browser.driver

    def start(self, seed: int) -> None:
        """Load the page if needed and begin a fresh, seeded, untimed episode."""
        with self.browser.lock:
            if self.driver.current_url != self.url:
                self.driver.get(self.url)
            ready = self.driver.execute_script(
                "if (core.EP_TIMER !== null) core.endEpisode(0);"
                f"core.EPISODE_MAX_TIME = {_NO_TIMER_MS};"
                "Math.seedrandom(arguments[0]); core.startEpisodeReal();"
                "return WOB_TASK_READY;",
                str(seed),
            )
            if not ready:
                raise RuntimeError(f"MiniWoB task {self.task!r} did not become ready")

    def utterance(self) -> str:
        with self.browser.lock:
            return str(self.driver.execute_script("return core.getUtterance();"))

    def dom(self) -> Node:
        with self.browser.lock:
            return parse_dom(self.driver.execute_script("return core.getDOMInfo();"))

    def status(self) -> Status:
        with self.browser.lock:
            done, raw, reason = self.driver.execute_script(
                "return [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];"
            )
        return Status(bool(done), float(raw), reason)

    def element(self, ref: int) -> Any:
        """The WebElement behind `ref`, as numbered by the last `dom()` call."""
        el = self.driver.execute_script(
            "var e = core.previousDOMInfo[arguments[0]];return (e && e.isConnected) ? e : null;",
            ref,
        )
        if el is None:
            raise LookupError(f"no element with ref {ref} on the current page")
        return el

    def screenshot(self) -> Any:
        """The task area as a PIL image (what MiniWoB's vision agents see)."""
        from PIL import Image

        with self.browser.lock:
            png = self.driver.get_screenshot_as_png()
            scale = float(self.driver.execute_script("return window.devicePixelRatio;") or 1.0)
        img = Image.open(io.BytesIO(png)).convert("RGB")
        img = img.crop((0, 0, int(TASK_W * scale), int(TASK_H * scale)))
        return img.resize((TASK_W, TASK_H)) if scale != 1.0 else img
