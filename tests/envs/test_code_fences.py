"""The code envs' fence scan: the same blocks as the regex it replaced, in linear work.

The regex (lazy body, kept here as the oracle) rescanned the rest of the text from every
fence whose block never closed: 80 KB of "``` " took 4 s, on the event loop of the rollout.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.envs.code.problems import extract_code, fenced_blocks

ORACLE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["```", "`", "\n", " ", "\t", "python", "py", "x", "-"])).map("".join)
)
def test_same_blocks_as_the_regex(text: str) -> None:
    assert fenced_blocks(text) == ORACLE.findall(text)


@pytest.mark.timeout(60)  # 4 MB each: the regex needed hours on these
@pytest.mark.parametrize(
    "text",
    [
        "``` " * 1_000_000,  # fences that never open a line
        "```\n" + "x```" * 1_000_000,  # a million blocks
        "```py " * 700_000 + "\nprint(1)\n",  # one opening line, no close
        "```python\n" + "`" * 4_000_000,  # backticks that never make a fence
    ],
)
def test_adversarial_texts_stay_linear(text: str) -> None:
    blocks = fenced_blocks(text)
    assert len(blocks) <= text.count("```")
    extract_code(text)
