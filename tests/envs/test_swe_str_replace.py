"""`str_replace`'s errors in linear work (host side, no sandbox needed).

Its error path used to count the lines before every match from the start of the file: a file
with 200k matches burnt a worker thread for minutes, far past the tool's 10 s timeout (a
thread cannot be stopped).
"""

from __future__ import annotations

import pytest

from agentrl.envs.swe.env import SweTools
from agentrl.sandboxes.workspace import Workspace


def _tools(files: dict[str, bytes]) -> SweTools:
    tools = SweTools("local", 10.0)
    tools.ws = Workspace(files, "local")
    return tools


def test_error_names_the_first_matches_lines() -> None:
    tools = _tools({"m.py": b"a = 1\n\nreturn x\nb\nreturn x\n" + b"\n" * 50 + b"return x\n"})
    out = tools.str_replace("m.py", "return x", "return y")
    assert out == "Error: old_str occurs 3 times in m.py (lines 3, 5, 56); make it unique"


@pytest.mark.timeout(120)  # the quadratic path needed minutes per call on this file
def test_two_hundred_thousand_matches_stay_linear() -> None:
    tools = _tools({"big.py": b"x = 1\n" * 200_000})
    out = tools.str_replace("big.py", "x", "y")
    assert out.startswith("Error: old_str occurs 200000 times in big.py (lines 1, 2, 3,")
    assert "10);" in out and "11," not in out  # only the first ten are numbered
    assert tools.ws is not None and tools.ws.read("big.py") == b"x = 1\n" * 200_000
