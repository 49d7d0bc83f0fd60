"""Browser actions as tools: click, type, press, scroll on elements named by their `ref`.

Actions go through WebDriver as real input events (a click lands on the element's centre and
fails if something covers it), so the page's own handlers decide the reward; nothing is done
by assigning DOM properties from JS. WebDriver errors come back to the model as one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from agentrl.tools import ToolSet, tool

from .page import TaskPage

Key = Literal["Enter", "Tab", "Backspace", "Escape", "ArrowUp", "ArrowDown", "Space"]
T = TypeVar("T")


class WebTools(ToolSet):
    """Tools over the env's current `TaskPage` (set by the env on reset)."""

    def __init__(self) -> None:
        super().__init__()
        self.page: TaskPage | None = None

    def _act(self, fn: Callable[[TaskPage], T]) -> T:
        from selenium.common.exceptions import WebDriverException

        if self.page is None:
            raise RuntimeError("no page is open; reset the env first")
        with self.page.browser.lock:
            try:
                return fn(self.page)
            except WebDriverException as e:
                first = (e.msg or type(e).__name__).strip().splitlines()[0]
                raise RuntimeError(f"browser refused: {first}") from None

    @tool(timeout_s=15.0)
    def click(self, ref: int) -> str:
        """Click an element of the page with the mouse.

        Args:
            ref: The element's number, shown in brackets in the latest page view.
        """
        self._act(lambda p: p.element(ref).click())
        return f"clicked [{ref}]"

    @tool(name="type", timeout_s=15.0)
    def type_text(self, ref: int, text: str) -> str:
        """Focus a text field and type text into it (appended to what is already there).

        Args:
            ref: The field's number, shown in brackets in the latest page view.
            text: The characters to type.
        """
        self._act(lambda p: p.element(ref).send_keys(text))
        return f"typed {text!r} into [{ref}]"

    @tool(timeout_s=15.0)
    def press(self, key: Key) -> str:
        """Press one key on the keyboard, sent to the focused element.

        Args:
            key: The key to press.
        """
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        code = " " if key == "Space" else getattr(Keys, _KEY_NAMES[key])
        self._act(lambda p: ActionChains(p.driver).send_keys(code).perform())
        return f"pressed {key}"

    @tool(timeout_s=15.0)
    def scroll(self, direction: Literal["up", "down"], ref: int | None = None) -> str:
        """Scroll the page, or one scrollable element, by 100 pixels.

        Args:
            direction: Which way to scroll.
            ref: A scrollable element's number; omit to scroll the whole page.
        """
        dy = 100 if direction == "down" else -100

        def run(p: TaskPage) -> Any:
            target = p.element(ref) if ref is not None else None
            js = "(arguments[0] || document.scrollingElement).scrollBy(0, arguments[1]);"
            return p.driver.execute_script(js, target, dy)

        self._act(run)
        return f"scrolled {direction}" + (f" in [{ref}]" if ref is not None else "")


_KEY_NAMES = {
    "Enter": "ENTER",
    "Tab": "TAB",
    "Backspace": "BACKSPACE",
    "Escape": "ESCAPE",
    "ArrowUp": "ARROW_UP",
    "ArrowDown": "ARROW_DOWN",
}
