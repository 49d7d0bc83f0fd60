"""Gold policies for the registered MiniWoB++ tasks.

Each oracle reads only what the model is shown (the utterance and the DOM view with refs)
and returns the tool calls that solve the task, one per turn. They exist so `check_env` can
prove every registered task is solvable at reward 1 in a real browser, and as a sanity
baseline for agents.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentrl.types import ToolCall

from .page import Node

Oracle = Callable[[str, Node], list[ToolCall]]
_QUOTED = re.compile(r'"([^"]*)"')


def _quoted(utterance: str) -> list[str]:
    return _QUOTED.findall(utterance)


def _find(root: Node, pred: Callable[[Node], bool], what: str) -> Node:
    for n in root.flat():
        if n.ref is not None and pred(n):
            return n
    raise LookupError(f"oracle: no {what} on the page")


def _click(n: Node) -> ToolCall:
    return ToolCall("click", {"ref": n.ref})


def _type(n: Node, text: str) -> ToolCall:
    return ToolCall("type", {"ref": n.ref, "text": text})


def _button(root: Node, label: str) -> Node:
    return _find(root, lambda n: n.tag == "button" and n.text == label, f"button {label!r}")


def _input(root: Node, id_: str | None = None) -> Node:
    return _find(
        root,
        lambda n: n.tag.startswith("input_") and (id_ is None or n.id == id_),
        f"input #{id_}" if id_ else "input",
    )


def click_test(u: str, root: Node) -> list[ToolCall]:
    return [_click(_find(root, lambda n: n.tag == "button", "button"))]


def click_button(u: str, root: Node) -> list[ToolCall]:
    return [_click(_button(root, _quoted(u)[0]))]


def click_link(u: str, root: Node) -> list[ToolCall]:
    word = _quoted(u)[0]
    return [_click(_find(root, lambda n: "alink" in n.classes and n.text == word, "link"))]


def click_dialog(u: str, root: Node) -> list[ToolCall]:
    close = _find(root, lambda n: "ui-dialog-titlebar-close" in n.classes, "close button")
    return [_click(close)]


def focus_text(u: str, root: Node) -> list[ToolCall]:
    return [_click(_input(root))]


def enter_text(u: str, root: Node) -> list[ToolCall]:
    return [_type(_input(root, "tt"), _quoted(u)[0]), _click(_button(root, "Submit"))]


def enter_password(u: str, root: Node) -> list[ToolCall]:
    pw = _quoted(u)[0]
    return [
        _type(_input(root, "password"), pw),
        _type(_input(root, "verify"), pw),
        _click(_button(root, "Submit")),
    ]


def login_user(u: str, root: Node) -> list[ToolCall]:
    user, pw = _quoted(u)[:2]
    return [
        _type(_input(root, "username"), user),
        _type(_input(root, "password"), pw),
        _click(_button(root, "Login")),
    ]


def click_checkboxes(u: str, root: Node) -> list[ToolCall]:
    m = re.match(r"Select (.*) and click Submit\.", u)
    wanted = set() if not m or m.group(1) == "nothing" else set(m.group(1).split(", "))
    calls = []
    for label in (n for n in root.flat() if n.tag == "label"):
        box = next(c for c in label.children if c.tag == "input_checkbox")
        name = " ".join(c.text for c in label.children if c.ref is None)
        if (name in wanted) != bool(box.value):
            calls.append(_click(box))
    return [*calls, _click(_button(root, "Submit"))]


ORACLES: dict[str, Oracle] = {
    "click-test": click_test,
    "click-button": click_button,
    "click-link": click_link,
    "click-dialog": click_dialog,
    "focus-text": focus_text,
    "enter-text": enter_text,
    "enter-password": enter_password,
    "login-user": login_user,
    "click-checkboxes": click_checkboxes,
}
