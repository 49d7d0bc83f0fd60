"""The quickstart's SFT'd model, shared by the two end-to-end tests in one session.

Why: the 500 SFT steps are ~80% of each test's time (~4 of 5 minutes on 2 cores). The
synchronous quickstart (test_quickstart.py, collected first) runs the recipe as the README
does, SFT inside `train()`, and keeps the SFT'd weights here; the pipelined comparison
(test_quickstart_async.py) starts from them, or runs the same SFT itself when run alone.
"""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def quickstart_sft() -> dict[str, Path]:
    """`{"model": HF dir}` once a test has exported the SFT'd weights; empty before."""
    return {}
