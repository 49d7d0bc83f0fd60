"""`skyrl:` ids: skyrl-gym's own gsm8k envs, driven by SkyRL-layout dataset rows."""

from __future__ import annotations

import pytest

pytest.importorskip("skyrl_gym", reason="needs skyrl-gym: pip install 'agentrl[skyrl]'")

import agentrl.envs as envs  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402

ROWS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} + {b}? End with '#### ANSWER'."}],
        "env_class": "gsm8k",
        "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": "test"},
    }
    for a, b in [(2, 3), (10, 7), (40, 2)]
]


def test_single_turn_gsm8k_reward_from_skyrls_own_scorer() -> None:
    env = envs.make("skyrl:gsm8k", rows=ROWS)
    obs, _ = env.reset(seed=0, options=ROWS[1])
    assert obs.messages[0].content.startswith("What is 10 + 7?") and obs.tools == []
    _, reward, done, _, _ = env.step(Message("assistant", "10 + 7 = 17\n#### 17"))
    assert (reward, done) == (1.0, True)
    env.reset(seed=0, options=ROWS[1])
    assert env.step(Message("assistant", "#### 18"))[1] == 0.0


def test_multi_turn_env_gets_observations_and_turn_rewards() -> None:
    env = envs.make("skyrl:gsm8k_multi_turn", rows=ROWS)
    env.reset(seed=0, options=ROWS[2])
    obs, reward, done, _, _ = env.step(Message("assistant", "#### 41"))
    assert not done and 0 < reward < 1 and "#### ANSWER" in obs.messages[0].content
    _, reward, done, _, info = env.step(Message("assistant", "#### 42"))
    assert (reward, done) == (1.0, True) and info["metrics"] == {"steps": 2}


def test_the_raw_reply_reaches_the_env_tool_calls_included() -> None:
    """skyrl envs parse the reply text themselves: calls the rollout split off go back in."""
    env = envs.make("skyrl:gsm8k", rows=ROWS)
    env.reset(seed=0, options=ROWS[0])
    call = ToolCall("answer", {"x": 5}, raw='{"name": "answer", "arguments": {"x": "#### 5"}}')
    assert env.step(Message("assistant", "", tool_calls=[call]))[1] == 1.0


def test_rows_from_file_and_envs_check(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    env = envs.make("skyrl:gsm8k", data_path=str(path))
    assert len(env.rows) == 3 and env.reset(seed=1)[0].messages
    assert main(["envs", "check", "skyrl:gsm8k"]) == 1  # no rows: one clear error
    assert "no task" in capsys.readouterr().out
    with pytest.raises(KeyError, match="no env 'nope'"):
        envs.make("skyrl:nope")
