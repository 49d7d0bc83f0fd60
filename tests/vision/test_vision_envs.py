"""The vision envs: deterministic images, image tool results (check_env with their oracles is
tests/envs/test_registry_envs.py's)."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.envs import make

VISION_IDS = ["vision/count-shapes-v0", "vision/bar-chart-v0", "vision/zoom-v0"]


@pytest.mark.parametrize("env_id", VISION_IDS)
def test_images_are_seeded(env_id: str) -> None:
    env = make(env_id)
    a = np.asarray(env.reset(seed=5)[0].messages[0].images[0])
    b = np.asarray(env.reset(seed=5)[0].messages[0].images[0])
    c = np.asarray(env.reset(seed=6)[0].messages[0].images[0])
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_zoom_tool_returns_an_image() -> None:
    env = make("vision/zoom-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(env.oracle_action())
    (msg,) = obs.messages
    assert msg.role == "tool" and not terminated and reward == 0.0
    assert len(msg.images) == 1 and msg.images[0].size == (448, 448)
    assert info["tool_results"][0].content.startswith("Zoomed into")
    obs, reward, terminated, _, _ = env.step(env.oracle_action())
    assert terminated and reward == 1.0
