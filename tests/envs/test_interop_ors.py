"""`ors:` ids: OpenReward environment classes (the real `openreward` SDK) as agentrl envs:
tools with their pydantic schemas, rewards and the finished flag, splits as train/eval."""

from __future__ import annotations

import pytest

pytest.importorskip("openreward", reason="needs openreward: pip install 'agentrl[ors]'")

import agentrl.envs as envs  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.config import DataConfig  # noqa: E402
from agentrl.trainer.data import TaskSource  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402


def _call(name: str, **args: object) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, dict(args), id=f"c-{name}")])


def test_tools_become_schemas_and_submit_earns_the_reward() -> None:
    env = envs.make("ors:arith")
    obs, info = env.reset(seed=3)
    assert info["split"] == "train" and obs.messages[0].role == "user"
    tools = {t["function"]["name"]: t["function"] for t in obs.tools}
    assert set(tools) == {"add", "submit"}
    assert tools["add"]["parameters"]["required"] == ["a", "b"]
    assert tools["submit"]["description"].startswith("Submit the final answer")
    a, b = int(env.instance.task_spec["a"]), int(env.instance.task_spec["b"])
    obs, reward, done, truncated, _ = env.step(_call("add", a=a, b=b))
    assert obs.messages[0].content == str(a + b) and reward == 0.0 and not done
    obs, reward, done, truncated, _ = env.step(_call("submit", answer=a + b))
    assert obs.messages[0].content == "correct" and reward == 1.0 and done and not truncated


def test_wrong_answer_finishes_with_0_and_bad_arguments_are_error_observations() -> None:
    env = envs.make("ors:arith")
    env.reset(seed=1)
    obs, reward, done, _, info = env.step(_call("submit", answer="not a number"))
    assert not done and reward == 0.0 and obs.messages[0].content.startswith("Error:")
    assert info["tool_outputs"][0]["error"] == "input_validation"
    obs, reward, done, _, _ = env.step(_call("nope"))
    assert "not a valid tool" in obs.messages[0].content and not done
    _, reward, done, _, _ = env.step(_call("submit", answer=-1))
    assert done and reward == 0.0


def test_a_reply_without_a_tool_call_ends_the_episode_unrewarded() -> None:
    env = envs.make("ors:arith")
    env.reset(seed=0)
    _, reward, done, _, info = env.step(Message("assistant", "42"))
    assert done and reward == 0.0 and "reply without a tool call" in info["ended"]


def test_splits_map_to_train_and_eval() -> None:
    train, test = envs.make("ors:arith", split="train"), envs.make("ors:arith", split="eval")
    assert (train.split, len(train.tasks)) == ("train", 8)
    assert (test.split, len(test.tasks)) == ("test", 4)
    with pytest.raises(KeyError, match="no split 'dev'"):
        envs.make("ors:arith", split="dev")


def test_the_trainers_eval_seeds_pose_eval_split_tasks_and_its_train_and_demo_seeds_train() -> None:
    """By default (`split="auto"`) a training run's held-out eval runs on the env's test split,
    never on the tasks it trains on."""
    env = envs.make("ors:arith")
    source = TaskSource(DataConfig(env="ors:arith", eval_episodes=6), seed=0)
    specs = {"train": set(), "test": set()}
    for items, split in (
        (source.eval_items(), "test"),
        (source.next_batch(6), "train"),
        (source.demo_items(6), "train"),
    ):
        for seed in items:
            assert isinstance(seed, int)
            _, info = env.reset(seed=seed)
            assert info["split"] == split, (seed, info)
            specs[split].add(tuple(sorted(env.instance.task_spec.items())))
    assert specs["test"] and specs["train"] and not specs["test"] & specs["train"]


def test_a_class_by_module_path_and_a_non_environment_is_refused() -> None:
    env = envs.make("ors:agentrl.envs.interop.ors_example:ArithEnvironment")
    assert len(env.tasks) == 8
    with pytest.raises(TypeError, match="not an openreward Environment"):
        envs.make("ors:pathlib:Path")


def test_envs_check_accepts_an_ors_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "ors:arith"]) == 0
    assert "PASS ors:arith" in capsys.readouterr().out
