"""A verifiers (0.4.0) rollout against `agentrl serve`, end to end, and a training step on
what the server recorded.

verifiers runs its own machinery unchanged: a taskset written with its API (`vf_calc`), its
chat program as the agent, its MCP tool server, its interception server and eval client, its
reward function. The program talks to `agentrl serve` over loopback; the server records each
rollout (verifiers sends its trace id as `X-Session-ID`) as one token-exact segment. The
rewards verifiers computed are posted back, and agentrl's GRPO actor trains on the segments.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from live_server import admin, live_server

from agentrl.config.schema import (
    AlgorithmConfig,
    OptimConfig,
    RolloutConfig,
    SamplingConfig,
    TrainerConfig,
)
from agentrl.types import Trajectory, TrajectoryGroup, read_jsonl

vf = pytest.importorskip("verifiers.v1", reason="verifiers==0.4.0 is not installed")
hf = pytest.importorskip("agentrl.engines.hf")

ROLLOUTS_PER_TASK = 2


async def _rollouts(url: str) -> list[Any]:
    cfg = vf.SingleAgentEnvConfig(
        taskset={"id": "vf_calc"},
        agent={"harness": {"id": "vf_calc"}, "runtime": {"type": "subprocess"}},
    )
    env = vf.SingleAgentEnv(cfg)
    client = vf.EvalClientConfig(base_url=f"{url}/v1", api_key_var="AGENTRL_TEST_KEY")
    ctx = vf.ModelContext(model="tiny", client=client)
    async with env.serving():
        runs = [env.run_episode(t, ctx) for t in env.taskset for _ in range(ROLLOUTS_PER_TASK)]
        return list(await asyncio.wait_for(asyncio.gather(*runs), 300))


def test_verifiers_rollout_is_recorded_and_trains(
    served_model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = str(Path(__file__).parent)  # vf_calc, for verifiers' tool-server subprocess
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("AGENTRL_TEST_KEY", "unused")
    monkeypatch.syspath_prepend(here)
    model, chat = served_model
    engine = hf.HFEngine(model, chat.tokenizer, max_batch_size=8)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=48)
    out = tmp_path / "served.jsonl"
    from agentrl.serve import create_app

    with live_server(create_app(engine, chat, sampling=sampling, out=out)) as url:
        episodes = asyncio.run(_rollouts(url))
        rewards: dict[str, float] = {}
        for ep in episodes:
            assert ep.ok, ep.errors
            (trace,) = ep.traces
            rewards[trace.id] = sum(r.score * r.weight for r in trace.rewards.values())
            post = f"{url}/v1/trajectories/{trace.id}/reward"
            httpx.post(
                post, json={"reward": rewards[trace.id]}, headers=admin(url)
            ).raise_for_status()
    segments = {t.group_id: t for t in read_jsonl(out)}  # the journal, as written
    assert set(segments) == set(rewards)  # one session per verifiers rollout
    for ep in episodes:
        (trace,) = ep.traces
        seg = segments[trace.id]
        seg.validate()
        assert seg.reward == rewards[trace.id]
        sent = [n.message for n in trace.nodes]
        assert [m.role for m in seg.messages] == [m.role for m in sent]
        calls = [
            (c.name, c.arguments) for m in sent for c in (getattr(m, "tool_calls", None) or [])
        ]
        recorded = [(c.name, c.arguments) for m in seg.messages for c in m.tool_calls]
        assert [(n, json.loads(a)) for n, a in calls] == recorded
        assert len(seg.turns) == sum(m.role == "assistant" for m in sent)

    groups: dict[str, list[Trajectory]] = {}
    for ep in episodes:
        groups.setdefault(ep.traces[0].task.key, []).append(segments[ep.traces[0].id])
    train_on(model, chat, [TrajectoryGroup(k, v) for k, v in groups.items()])


def train_on(model: Any, chat: Any, groups: list[TrajectoryGroup]) -> None:
    """One GRPO step of agentrl's actor on served segments; the trainer's log-probs of the
    sampled tokens equal the ones the server recorded (the step-0 importance ratio is 1)."""
    from agentrl.algorithms.advantages import AdvantageInput, compute_advantages
    from agentrl.backends import TorchBackend
    from agentrl.trainer.actor import Actor
    from agentrl.trainer.roles import RewardScorer

    algo = AlgorithmConfig()
    scorer = RewardScorer(algo, RolloutConfig(n=ROLLOUTS_PER_TASK), chat.tokenizer.pad_token_id)
    batch = scorer.batch(groups)
    policy = copy.deepcopy(model)
    trainer = TrainerConfig(steps=1, mini_batch_size=batch.size, micro_batch_size=2)
    actor = Actor(policy, TorchBackend("cpu"), algo, OptimConfig(lr=1e-3), trainer, 1.0)
    old = actor.compute_log_probs(batch)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(old[mask], batch.rollout_log_probs[mask], atol=2e-4, rtol=0)
    inp = AdvantageInput(
        token_rewards=batch.token_rewards, mask=batch.response_mask, group_index=batch.group_index
    )
    batch.advantages, batch.returns = compute_advantages(inp, algo)
    before = [p.detach().clone() for p in policy.parameters()]
    metrics = actor.update(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    moved = any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert moved == bool(batch.advantages.abs().sum() > 0)  # a zero-advantage batch is a no-op
