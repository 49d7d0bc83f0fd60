"""Web envs: MiniWoB++ tasks in real headless Chromium (see `miniwob.py`).

Registration needs no browser; building an env does, and fails with an install hint
(`scripts/setup-web.sh`) when Chromium is missing.
"""

from ..registration import register

_TASKS = {
    "click-test": "Click the one button",
    "click-button": "Click the button with the named label",
    "click-link": "Click the named link inside a paragraph",
    "click-dialog": "Close a jQuery UI dialog with its x",
    "click-checkboxes": "Tick exactly the named checkboxes, then Submit",
    "focus-text": "Focus the text box",
    "enter-text": "Type the given text into a field and Submit",
    "enter-password": "Type a password into two fields and Submit",
    "login-user": "Fill username and password, then Login",
}

for _task, _desc in _TASKS.items():
    register(
        f"web/{_task}-v0",
        "agentrl.envs.web.miniwob:MiniWoBEnv",
        description=f"MiniWoB++ {_task}: {_desc} (Chromium; oracle available)",
        task=_task,
    )
