"""One harness episode on the real gateway, with every engine call kept: the tests' ground truth.

`run_episode` runs an agent program exactly as `agentrl train --agent` does (the `Harness`:
the env's task, a gateway session over the hf engine on the tiny model, the program in a
child process, the env's tools at `task["tools_url"]`, the env's grader), with the engine
wrapped by `Recorder` so each recorded segment can be checked against what the engine was
actually given and sampled.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rollout"))  # simple_engine.Recorder

from simple_engine import Recorder  # noqa: E402

import agentrl  # noqa: E402
from agentrl.chat.format import ChatFormat  # noqa: E402
from agentrl.config.schema import HarnessConfig, SamplingConfig  # noqa: E402
from agentrl.rollout.gateway_host import GatewayHost  # noqa: E402
from agentrl.rollout.harness import Episode, Harness  # noqa: E402
from agentrl.types import Trajectory  # noqa: E402


def run_episode(
    cache: Path, env_id: str, agent: str, seed: int = 0, timeout_s: float = 400.0
) -> tuple[Episode, list[tuple[list[int], Any]]]:
    """(the episode, the engine's (prompt ids, result) calls in order) for one run."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrl.engines.hf import HFEngine
    from agentrl.models.tiny import build_tiny

    path = build_tiny("qwen2", str(cache))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    inner = HFEngine(model, tok, max_batch_size=4)
    engine = Recorder(inner)
    engine.features = inner.features  # grammar constraints (tool_choice), as the plain engine
    cfg = HarnessConfig(agent=agent, timeout_s=timeout_s)

    async def main() -> Episode:
        host = GatewayHost(engine, ChatFormat(tok), SamplingConfig(), tokenizer_name=path)
        await host.start()
        try:
            harness = Harness(host, cfg, lambda: agentrl.make(env_id))
            return await harness.episode(seed, 0, 0, "t-")
        finally:
            await host.stop()

    episode = asyncio.run(main())
    calls = [c for log in engine.log.values() for c in log]
    return episode, calls


def assert_token_exact(segments: list[Trajectory], calls: list[tuple[list[int], Any]]) -> None:
    """Every engine call is one recorded turn, in order: the engine's prompt is the segment's
    ids before that turn (history re-sent by the program included, so the model saw its own
    sampled tokens), and the turn's ids and log-probs are exactly what it sampled."""
    turns = [(seg, turn) for seg in segments for turn in seg.turns]
    assert len(turns) == len(calls) > 0
    for (prompt, result), (seg, turn) in zip(calls, turns, strict=True):
        seg.validate()
        assert prompt == seg.prompt_ids + seg.response_ids[: turn.start]
        assert seg.response_ids[turn.start : turn.end] == result.token_ids
        assert seg.loss_mask[turn.start : turn.end] == [1] * len(result.token_ids)
        assert seg.logprobs[turn.start : turn.end] == result.logprobs
