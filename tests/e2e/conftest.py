"""The quickstart's SFT'd model and its synchronous RL result, shared by the two end-to-end
tests in one session.

Why: the 500 SFT steps are ~80% of each test's time (~4 of 5 minutes on 2 cores), and the
pipelined comparison's synchronous baseline is the same 10 GRPO steps from the same weights
that the quickstart test has just run. The synchronous quickstart (test_quickstart.py,
collected first) runs the recipe as the README does, SFT inside `train()`, and keeps the SFT'd
weights and its final held-out success here; the pipelined comparison
(test_quickstart_async.py) starts from them, or runs the SFT and the synchronous baseline
itself when run alone.
"""

from typing import Any

import pytest


@pytest.fixture(scope="session")
def quickstart_sft() -> dict[str, Any]:
    """`{"model": HF dir}` once a test has exported the SFT'd weights, and `"sync_after"`
    (the `train()` result of 10 synchronous GRPO steps from them) once that run finished;
    empty before."""
    return {}
