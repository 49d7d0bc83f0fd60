"""Real vLLM built the way the trainer builds it (`engine.kind: vllm` with no dtype in
`engine.extra`: a loaded float32 policy is handed to `build_engine`). Two bugs the other
modules could not see because they pass `dtype` and small batches explicitly:

- vLLM's "auto" dtype ran the rollout in bfloat16 while the trainer scored float32;
- 64 seeded multi-turn requests made vLLM split a prefill over two steps, and rewinding the
  seeded request's CPU generator killed the engine core ("CPU Generator does not use
  offset"): the quickstart died at step 28."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import vllm_checks as checks

from agentrl.config.schema import EngineConfig
from agentrl.engines import build_engine

pytestmark = checks.MARKS


@pytest.fixture(scope="module")
def engine(small_model: Any, loop: Any) -> Iterator[Any]:
    # As agentrl/assembly/build.py does: the loaded policy, only the start-up options CI needs.
    cfg = EngineConfig(kind="vllm", extra={"enforce_eager": True, "max_model_len": 512})
    engine = build_engine(cfg, small_model[0], small_model[1])
    yield engine
    checks.run(loop, engine.close())


def test_dtype_follows_the_trainer(engine: Any, small_model: Any, loop: Any) -> None:
    # bf16 would miss a float32 re-score by ~1e-2.
    checks.logprobs_match_rescore(loop, engine, *small_model)


def test_seeded_requests_beyond_one_step_budget_survive(engine: Any, loop: Any) -> None:
    checks.seeded_requests_beyond_one_step_budget_survive(loop, engine)
