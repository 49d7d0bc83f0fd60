"""Token exactness of multi-turn tool episodes on a real model.

The trainer-side sequence must equal prompt render + sampled ids + rendered observation ids,
the loss mask must be 1 exactly on sampled ids, and re-scoring the whole sequence with the
same model must reproduce the rollout's logprobs (float32 CPU, temperature 1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from simple_engine import Recorder, SimpleTorchEngine

import agentrl.envs as envs
from agentrl.chat import ChatFormat
from agentrl.config.schema import RolloutConfig, SamplingConfig
from agentrl.engines.base import Engine
from agentrl.rollout import RolloutRunner
from agentrl.types import Trajectory


def make_engine(kind: str, model: Any, chat: ChatFormat) -> Engine:
    if kind == "simple":
        return SimpleTorchEngine(model, chat.stop_token_ids)
    hf = pytest.importorskip("agentrl.engines.hf")
    return hf.HFEngine(model, chat.tokenizer, max_batch_size=8)


def collect(engine: Engine, chat: ChatFormat, seeds: list[int], n: int) -> list[Trajectory]:
    cfg = RolloutConfig(n=n, max_turns=3, max_total_tokens=512, concurrency=8)
    runner = RolloutRunner(
        engine,
        chat,
        lambda: envs.make("math/calc-v0"),
        cfg,
        SamplingConfig(temperature=1.0, max_new_tokens=48),
    )
    groups = runner.collect_sync(seeds, n)
    runner.close()
    return [t for g in groups for t in g.trajectories]


def expected_ids(chat: ChatFormat, traj: Trajectory, sampled: list[list[int]]) -> list[int]:
    """Rebuild the sequence from scratch: prompt render, then per turn the engine's ids and
    the fixed-base render of the messages the env answered with."""
    first = next(i for i, m in enumerate(traj.messages) if m.role == "assistant")
    tools = envs.make("math/calc-v0").tools.schemas
    # The trajectory records the schemas its prompt rendered (`agentrl view --diff` uses them).
    assert traj.metadata["tools"] == tools
    ids = chat.prompt_ids(traj.messages[:first], traj.metadata["tools"])
    assert ids == traj.prompt_ids
    blocks, cur = [], None
    for m in traj.messages[first:]:
        if m.role == "assistant":
            cur = []
            blocks.append(cur)
        else:
            cur.append(m)
    for k, turn in enumerate(traj.turns):
        ids = ids + sampled[k]
        if turn.obs_end > turn.end:
            ids = ids + chat.observation_ids(blocks[k], tools, sampled_ids=sampled[k])
    return ids


@pytest.mark.parametrize("kind", ["simple", "hf"])
def test_multi_turn_token_exact(kind: str, agent_model: Any, chat: ChatFormat) -> None:
    torch.manual_seed(1)
    engine = Recorder(make_engine(kind, agent_model, chat))
    trajs = collect(engine, chat, seeds=[0, 1, 2, 3], n=2)
    assert max(len(t.turns) for t in trajs) >= 2, "need real multi-turn episodes"
    for traj in trajs:
        traj.validate()
        calls = engine.log[f"{traj.group_id}/{traj.metadata['sample']}"]
        assert len(calls) == len(traj.turns)
        sampled = [list(out.token_ids) for _, out in calls]
        for (prompt, _), turn in zip(calls, traj.turns, strict=True):
            # the engine saw exactly the trainer's prefix at every turn
            assert prompt == traj.input_ids[: len(traj.prompt_ids) + turn.start]
        assert traj.input_ids == expected_ids(chat, traj, sampled)
        mask = [0] * len(traj.response_ids)
        for turn, ids in zip(traj.turns, sampled, strict=True):
            assert traj.response_ids[turn.start : turn.end] == ids
            mask[turn.start : turn.end] = [1] * len(ids)
        assert traj.loss_mask == mask
        assert len(traj.input_ids) <= 512
    if kind == "simple":
        rescore(agent_model, trajs)


def rescore(model: Any, trajs: list[Trajectory]) -> None:
    for traj in trajs:
        ids = torch.tensor([traj.input_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        p = len(traj.prompt_ids)
        targets = ids[0, p:]
        got = logp[p - 1 : -1].gather(-1, targets[:, None]).squeeze(-1)
        mask = torch.tensor(traj.loss_mask, dtype=torch.bool)
        diff = (got[mask] - torch.tensor(traj.logprobs)[mask]).abs().max().item()
        assert diff < 1e-4, diff


def test_rescore_hf_engine(agent_model: Any, chat: ChatFormat) -> None:
    pytest.importorskip("agentrl.engines.hf")
    torch.manual_seed(2)
    trajs = collect(make_engine("hf", agent_model, chat), chat, seeds=[4, 5], n=2)
    rescore(agent_model, trajs)


def test_runs_inside_event_loop(agent_model: Any, chat: ChatFormat) -> None:
    """`collect` is awaitable from the trainer's own loop; `collect_sync` refuses there."""
    cfg = RolloutConfig(n=2, max_turns=2, max_total_tokens=400)
    runner = RolloutRunner(
        SimpleTorchEngine(agent_model, chat.stop_token_ids),
        chat,
        lambda: envs.make("math/calc-v0"),
        cfg,
        SamplingConfig(),
    )

    async def main() -> None:
        groups = await runner.collect([7], cfg.n)
        assert [len(g.trajectories) for g in groups] == [2]
        with pytest.raises(RuntimeError, match="await collect"):
            runner.collect_sync([7], cfg.n)

    asyncio.run(main())


def test_seeded_runs_reproduce_and_samples_differ(agent_model: Any, chat: ChatFormat) -> None:
    cfg = RolloutConfig(n=3, max_turns=2, max_total_tokens=400)

    def once() -> list[list[int]]:
        runner = RolloutRunner(
            SimpleTorchEngine(agent_model, chat.stop_token_ids),
            chat,
            lambda: envs.make("math/calc-v0"),
            cfg,
            SamplingConfig(max_new_tokens=24),
            seed=123,
        )
        return [t.response_ids for g in runner.collect_sync([3], cfg.n) for t in g.trajectories]

    first = once()
    assert first == once()
    assert len({tuple(r) for r in first}) > 1
