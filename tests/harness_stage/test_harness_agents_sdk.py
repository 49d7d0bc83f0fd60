"""The OpenAI Agents SDK, unchanged (`examples/harness/agents_sdk_calc.py`), against the gateway:
its chat-completions model (`OpenAIChatCompletionsModel`) and its default Responses model
(`OpenAIResponsesModel`), run plainly and streamed (`Runner.run_streamed` reads the chat chunks
or the Responses events), each one episode where the model calls the calculator, the SDK runs
it and the session stays token-exact; then `agentrl train --agent ...` on each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "agents", reason="the Agents SDK is in .venv-harness (scripts/setup-harness.sh)"
)

from agents import (  # noqa: E402
    MaxTurnsExceeded,
    ModelBehaviorError,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
)
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from stage_gateway import (  # noqa: E402
    REPO,
    assert_tool_episode_token_exact,
    gateway,
    run_episode,
    train,
)

from agentrl.cli import main  # noqa: E402
from examples.harness import agents_sdk_calc  # noqa: E402

pytestmark = pytest.mark.timeout(900)
__all__ = ["gateway"]  # the module-scoped fixture, used by name
MODELS = {"chat": OpenAIChatCompletionsModel, "responses": OpenAIResponsesModel}


@pytest.mark.parametrize("fn", ["solve", "solve_responses"])
def test_episode_calls_the_tool_token_exact(gateway: Any, fn: str) -> None:
    answer = run_episode(gateway, getattr(agents_sdk_calc, fn), f"sdk-{fn}")
    seg = assert_tool_episode_token_exact(gateway, f"sdk-{fn}")
    said = seg.messages[-1]
    cut = fn == "solve_responses" and seg.turns[-1].finish_reason == "length"
    assert said.role == "assistant" and answer == ("" if cut else said.content)  # cut: raised


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_streamed_run_calls_the_tool_token_exact(gateway: Any, kind: str) -> None:
    """`Runner.run_streamed` on the example's agent: the SDK builds the call from the streamed
    events, runs the tool and continues the session."""
    items: list[str] = []

    async def streamed(task: dict[str, Any], base_url: str) -> None:
        client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        model = MODELS[kind](model="policy", openai_client=client)
        run = Runner.run_streamed(agents_sdk_calc.calc_agent(model), task["prompt"], max_turns=4)
        try:
            async for event in run.stream_events():
                if event.type == "run_item_stream_event":
                    items.append(event.item.type)
        except ModelBehaviorError:  # the answer ran out of tokens (`response.incomplete`)
            assert kind == "responses"

    run_episode(gateway, streamed, f"sdk-stream-{kind}")
    assert items[:2] == ["tool_call_item", "tool_call_output_item"]
    assert_tool_episode_token_exact(gateway, f"sdk-stream-{kind}")


class Answer(BaseModel):
    value: int


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_structured_output_agent_still_calls_its_tool(gateway: Any, kind: str) -> None:
    """The example's agent with an `output_type` sends the schema with every turn (chat:
    `response_format`, Responses: `text.format`) beside `tool_choice="required"`, then `auto`:
    the gateway samples the forced call (that pair was a 400), then a call or the schema's
    JSON answer (it was the answer only); the SDK parses what comes back, token-exact."""
    got: list[Any] = []

    async def typed(task: dict[str, Any], base_url: str) -> None:
        client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
        agent = agents_sdk_calc.calc_agent(MODELS[kind](model="policy", openai_client=client))
        try:
            result = await Runner.run(agent.clone(output_type=Answer), task["prompt"], max_turns=3)
            got.append(result.final_output)
        except MaxTurnsExceeded:  # the model kept calling the tool
            got.append("max_turns")
        except ModelBehaviorError:  # the answer ran out of tokens
            got.append("cut")

    run_episode(gateway, typed, f"sdk-typed-{kind}")
    seg = assert_tool_episode_token_exact(gateway, f"sdk-typed-{kind}", later="response_format")
    (out,) = got
    assert isinstance(out, Answer) or out == "max_turns" or seg.turns[-1].finish_reason == "length"


@pytest.mark.parametrize(("fn", "steps"), [("solve", 2), ("solve_responses", 1)])
def test_agentrl_train_agent(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fn: str, steps: int
) -> None:
    """The documented command, from the repository root: every run trained, none failed."""
    agent = f"examples.harness.agents_sdk_calc:{fn}"
    train(agent, tmp_path / "run", agentrl_cache, monkeypatch, steps)


def test_gpu_recipe_runs_one_step_on_cpu(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/smollm2-agents-sdk-gpu.yaml (word problems, the learning run of issue #40) as
    written, shrunk to one step on the tiny model on CPU: the config loads, the plain hf engine
    (`engine.hf.fast: false`) serves the agent's grammar-forced first call, every run is
    trained and scored by the word env's grader, and the held-out evals run before and after."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = tmp_path / "run"
    settings = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": str(agentrl_cache),
        "trainer.device": "cpu",
        "data.batch_size": 2,
        "rollout.n": 2,
        "rollout.concurrency": 4,
        "data.eval_episodes": 2,
        "trainer.steps": 1,
        "trainer.eval_every": 0,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 4,
        "trainer.tensorboard": "false",
        "trainer.out_dir": str(out),
    }
    config = REPO / "configs" / "smollm2-agents-sdk-gpu.yaml"
    assert main(["train", "--config", str(config), *(f"{k}={v}" for k, v in settings.items())]) == 0
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["harness/infra_failed"] == 0 and row["harness/episodes"] == 4
    assert row["tool_calls"] >= 4  # every run's forced first turn called the calculator
    evals = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert len(evals) == 2  # before and after
    # the held-out runs' forced first turns are counted as the tool calls the model wrote
    assert all(e["harness/infra_failed"] == 0 and e["tool_calls/episode"] >= 1 for e in evals)


def test_agentrl_train_typed_argument_agent(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`examples/harness/agents_sdk_ops.py` (a calculator of `a: int, b: int, op: Literal`):
    its forced first call is sampled under that JSON schema, every run is trained, token-exact."""
    train("examples.harness.agents_sdk_ops:solve", tmp_path / "run", agentrl_cache, monkeypatch, 1)
