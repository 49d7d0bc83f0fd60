"""Done-when test of the vision stack: a 3-turn episode whose tool returns a new image at turn 2
is re-scored by the trainer to the rollout's logprobs, with image token counts matching the
pixel inputs on every generate call."""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from agentrl.chat import ChatFormat
from agentrl.config import RolloutConfig, SamplingConfig
from agentrl.engines.hf_vision import HFVisionEngine
from agentrl.envs import make
from agentrl.envs.vision.zoom import REGIONS, ZoomEnv
from agentrl.multimodal import check_alignment, image_entries
from agentrl.rollout.episode import run_episode
from agentrl.rollout.runner import sampling_params
from agentrl.trainer.batch import collate
from agentrl.trainer.logprobs import response_log_probs
from agentrl.trainer.sft import demo_trajectory
from agentrl.types import Message, ToolCall, Trajectory, TrajectoryGroup


class ForcedZoomEnv(ZoomEnv):
    """ZoomEnv whose first two turns always zoom (a random model never writes the tool call
    itself): the real image tool runs and its image arrives as a tool message at turns 2, 3."""

    async def astep(self, action: Message) -> Any:
        if self.turn < 2:
            call = ToolCall("zoom", {"region": REGIONS[self.turn]}, id=f"call_{self.turn}")
            action = Message("assistant", action.content, tool_calls=[call])
        return await super().astep(action)


class CheckedEngine(HFVisionEngine):
    """Asserts, on every call, that the prompt's image tokens match the pixel inputs."""

    calls: list[tuple[int, int]]

    async def generate(self, prompt_ids: Any, params: Any, **kw: Any) -> Any:
        mm = kw.get("multimodal")
        grid = mm["image_grid_thw"]
        n_tokens = sum(1 for t in prompt_ids if t == self.image_token_id)
        assert n_tokens == int((grid.prod(-1) // 4).sum())  # merge 2 → 4 patches per token
        assert mm["pixel_values"].shape[0] == int(grid.prod(-1).sum())
        self.calls.append((len(grid), n_tokens))
        return await super().generate(prompt_ids, params, **kw)


def _episode(vlm: tuple[Any, Any, Any], seed: int) -> tuple[Trajectory, CheckedEngine]:
    model, tok, vp = vlm
    chat = ChatFormat(tok, vision=vp)
    engine = CheckedEngine(model, tok)
    engine.calls = []
    cfg = RolloutConfig(max_turns=3, max_total_tokens=1024)
    params = sampling_params(SamplingConfig(max_new_tokens=8), chat, seed=seed)
    # A random model rarely samples its end-of-turn token: let every third id end a turn so
    # episodes run all three turns instead of ending "overlong".
    params.stop_token_ids += list(range(0, len(tok), 3))
    env = ForcedZoomEnv()
    traj = asyncio.run(
        run_episode(env, engine, chat, params, cfg, seed=seed, session_id=f"ep{seed}")
    )
    return traj, engine


def test_three_turn_episode_rescored_by_trainer(vlm: tuple[Any, Any, Any]) -> None:
    model, tok, _ = vlm
    trajs = []
    for seed in (0, 1):
        traj, engine = _episode(vlm, seed)
        assert traj.termination == "done", traj.metadata.get("error")
        assert len(traj.turns) == 3
        traj.validate()
        # one new image per generate call: prompt image, then the two tool images
        assert [n for n, _ in engine.calls] == [1, 2, 3]
        assert engine.stats["reused_tokens"] > 0  # later turns prefilled only their suffix
        entries = image_entries(traj.multimodal)
        assert [e["turn"] for e in entries] == [0, 1, 2]
        assert traj.messages[2].role == "tool" and len(traj.messages[2].images) == 1
        check_alignment(traj.input_ids, traj.multimodal)
        trajs.append(Trajectory.from_json(traj.to_json()))  # what the trainer reads back

    # A text-only row in the same batch must not shift the image rows' pixel slices.
    text_row = Trajectory(prompt_ids=[1, 2, 3], response_ids=[4], loss_mask=[1], logprobs=[0.0])
    batch = collate([TrajectoryGroup("g", [trajs[0], text_row, trajs[1]])], tok.pad_token_id)
    with torch.no_grad():
        logp, _ = response_log_probs(model, batch)
    rows = [0, 2]
    mask = batch.response_mask[rows]
    gap = ((logp[rows] - batch.rollout_log_probs[rows]).abs() * mask).max()
    assert mask.sum() > 0
    assert float(gap) < 1e-4, f"engine/trainer logprob gap {float(gap)}"
    # micro-batches of one row select their own images
    for r in rows:
        sub = batch.select([r])
        with torch.no_grad():
            lp, _ = response_log_probs(model, sub)
        diff = ((lp[0] - sub.rollout_log_probs[0]).abs() * sub.response_mask[0]).max()
        assert float(diff) < 1e-4


def test_sft_demo_keeps_images(vlm: tuple[Any, Any, Any]) -> None:
    """The SFT bootstrap's oracle demos carry the prompt and tool images like rollouts do."""
    model, tok, vp = vlm
    demo = demo_trajectory(make("vision/zoom-v0"), ChatFormat(tok, vision=vp), seed=0)
    assert demo is not None and demo.reward == 1.0
    assert len(image_entries(demo.multimodal)) == 2  # the prompt image and the zoomed one
    check_alignment(demo.input_ids, demo.multimodal)
    batch = collate([TrajectoryGroup("g", [demo])], tok.pad_token_id)
    with torch.no_grad():
        logp, _ = response_log_probs(model, batch)
    assert bool(torch.isfinite(logp).all())
