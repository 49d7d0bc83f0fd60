"""MiniWoB++ envs in real headless Chromium: oracle episodes reach reward 1, wrong actions
fail, bad calls are observations, and no browser process outlives the pool.

All tests share one browser through a module-scoped pool (starting Chromium costs ~1 s).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from agentrl.envs import check_env, make
from agentrl.tools import browser as browser_mod
from agentrl.tools.browser import BrowserPool, BrowserUnavailable, leaked_processes
from agentrl.types import Message, ToolCall

HAVE_CHROMIUM = os.path.exists("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not HAVE_CHROMIUM, reason="/usr/bin/chromium missing: run scripts/setup-web.sh"
)
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pool():
    p = BrowserPool(max_size=1)
    yield p
    p.close()
    browser_mod.shared_pool().close()  # the registry-wide check_env test uses the shared pool
    assert leaked_processes() == [], "browser processes outlived BrowserPool.close()"


def _act(*calls: tuple[str, dict]) -> Message:
    return Message(
        "assistant", "", tool_calls=[ToolCall(n, a, id=f"c{i}") for i, (n, a) in enumerate(calls)]
    )


def _run_oracle(env, seed: int) -> tuple[float, int]:
    env.reset(seed=seed)
    for turn in range(1, env.max_turns + 1):
        _, reward, terminated, truncated, _ = env.step(env.oracle_action())
        if terminated or truncated:
            return reward, turn
    raise AssertionError("oracle never finished")


@needs_chromium
@pytest.mark.parametrize("task", ["enter-text", "click-checkboxes", "login-user"])
def test_oracle_clicks_through_to_reward_1(pool, task: str) -> None:
    with make(f"web/{task}-v0", pool=pool) as env:
        for seed in (0, 7):
            reward, turns = _run_oracle(env, seed)
            assert reward == 1.0 and turns >= 2, (task, seed, reward, turns)


@needs_chromium
def test_check_env_passes(pool) -> None:
    with make("web/click-button-v0", pool=pool) as env:
        assert check_env(env)["oracle"] is True


@needs_chromium
def test_typing_shows_in_next_observation_and_wrong_text_fails(pool) -> None:
    with make("web/enter-text-v0", pool=pool) as env:
        obs, info = env.reset(seed=3)
        assert info["utterance"].startswith("Enter ")
        field = env.oracle_action().tool_calls[0].arguments["ref"]
        obs, reward, term, trunc, _ = env.step(_act(("type", {"ref": field, "text": "zzq"})))
        assert (reward, term, trunc) == (0.0, False, False)
        assert "value='zzq'" in obs.messages[-1].content
        submit = next(ln for ln in obs.messages[-1].content.splitlines() if "'Submit'" in ln)
        ref = int(submit.split("[")[1].split("]")[0])
        _, reward, term, _, _ = env.step(_act(("click", {"ref": ref})))
        assert (reward, term) == (-1.0, True)


@needs_chromium
def test_calls_in_one_message_run_in_order_and_stop_at_the_end(pool) -> None:
    with make("web/enter-text-v0", pool=pool) as env:
        env.reset(seed=5)
        plan = [env.oracle_action().tool_calls[0]]
        env.turn = 1
        plan.append(env.oracle_action().tool_calls[0])
        env.turn = 0
        extra = ("click", {"ref": plan[1].arguments["ref"]})
        obs, reward, term, _, _ = env.step(_act(*[(c.name, c.arguments) for c in plan], extra))
        assert (reward, term) == (1.0, True)
        assert "Not run" in obs.messages[-1].content


@needs_chromium
def test_bad_ref_and_give_up(pool) -> None:
    with make("web/click-test-v0", pool=pool) as env:
        env.reset(seed=0)
        obs, reward, term, _, info = env.step(_act(("click", {"ref": 999})))
        assert not term and reward == 0.0 and info["tool_errors"] == 1
        assert "no element with ref 999" in obs.messages[0].content
        _, reward, term, _, _ = env.step(Message("assistant", "I give up."))
        assert (reward, term) == (-1.0, True)


@needs_chromium
def test_seeding_screenshot_and_async(pool) -> None:
    with make("web/click-button-v0", pool=pool, screenshot=True) as env:
        a = env.reset(seed=11)[0].messages[0]
        b = env.reset(seed=11)[0].messages[0]
        c = env.reset(seed=12)[0].messages[0]
        assert a.content == b.content != c.content
        assert a.images and a.images[0].size == (160, 210)

        async def episode() -> float:
            await env.areset(seed=2)
            out = await env.astep(env.oracle_action())
            return out[1]

        assert asyncio.run(episode()) == 1.0


@needs_chromium
def test_browser_close_leaves_no_process() -> None:
    with browser_mod.Browser() as b:
        assert len(b.processes()) >= 3, "expected chromedriver + chromium processes"
        b.driver.get("about:blank")
    assert b.processes() == []


def test_missing_chromium_fails_with_setup_hint(monkeypatch) -> None:
    monkeypatch.setattr(browser_mod, "CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(BrowserUnavailable, match="setup-web.sh"):
        make("web/click-test-v0")
