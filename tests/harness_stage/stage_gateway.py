"""What the harness-stage tests share: the gateway on the tiny model, one agent episode run
against it, the token-exactness check of what it recorded, and the `agentrl train --agent` run.

Real parts: the random-init tiny qwen2 and its tokenizer, the plain hf engine (it honours
`tool_choice` by grammar-constrained sampling, so an untrained model makes a real call),
the real `agentrl serve` app under uvicorn on loopback, the SDK under test unchanged. The
engine is wrapped (`Recorder`, tests/rollout) only to keep what it was given and sampled.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path[:0] = [str(TESTS / "serve"), str(TESTS / "rollout"), str(REPO)]

pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")
pytest.importorskip("llguidance", reason="tool_choice needs the serve extra")
hf = pytest.importorskip("agentrl.engines.hf")

from live_server import live_server, segments  # noqa: E402
from simple_engine import Recorder  # noqa: E402

from agentrl.chat import ChatFormat  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.serve import create_app  # noqa: E402
from agentrl.types import Trajectory  # noqa: E402
from examples.harness.arithmetic import evaluate  # noqa: E402

TASK = {"prompt": "What is 12 + 30?", "messages": [], "tools": [], "seed": 0, "env": "test"}
Agent = Callable[[dict[str, Any], str], Any]


@pytest.fixture(scope="module")
def gateway(tiny_model_dir: Path) -> Iterator[tuple[str, Recorder, ChatFormat]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    chat = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))
    inner = hf.HFEngine(model, chat.tokenizer, max_batch_size=4)
    engine = Recorder(inner)
    engine.features = inner.features  # constraints and token streaming, as the plain engine
    with live_server(create_app(engine, chat, model_name="tiny")) as url:
        yield url, engine, chat


def run_episode(gateway: tuple[str, Recorder, ChatFormat], agent: Agent, session: str) -> Any:
    """The agent's answer to `TASK`, the agent called as the trainer calls it."""
    url = gateway[0]
    out = agent(TASK, f"{url}/s/{session}/v1")
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


def assert_tool_episode_token_exact(
    gateway: tuple[str, Recorder, ChatFormat], session: str, later: str | None = None
) -> Trajectory:
    """The session is one segment whose first turn is a forced calculator call, whose tool
    result the agent computed (the calculator's own output on the sampled arguments) and sent
    back, and which continued on the model's own tokens: the engine's k-th prompt is the
    segment's ids before turn k, each turn's ids and logprobs are exactly what the engine
    sampled (mask 1), and re-rendering the first request's messages and tools with the chat
    template gives exactly the first prompt's ids. `later`: how every later turn was
    constrained (an agent with structured output: "response_format"), None: not at all."""
    url, engine, chat = gateway
    (seg,) = segments(url, session)
    log = engine.log[session]
    assert len(log) == len(seg.turns) >= 2
    assert seg.metadata["appends"] == ["messages"] * (len(log) - 1)
    first_turn = seg.messages.index(next(m for m in seg.messages if m.role == "assistant"))
    assert log[0][0] == seg.prompt_ids
    assert seg.prompt_ids == chat.prompt_ids(seg.messages[:first_turn], seg.metadata["tools"])
    for (prompt, result), turn in zip(log, seg.turns, strict=True):
        assert prompt == seg.prompt_ids + seg.response_ids[: turn.start]
        assert seg.response_ids[turn.start : turn.end] == result.token_ids
        assert seg.logprobs[turn.start : turn.end] == result.logprobs
        assert seg.loss_mask[turn.start : turn.end] == [1] * len(result.token_ids)
        assert seg.loss_mask[turn.end : turn.obs_end] == [0] * (turn.obs_end - turn.end)

    call_turn = seg.turns[0]
    later_turns = {str(k): later for k in range(1, len(seg.turns))} if later else {}
    assert seg.metadata["constrained_turns"] == {"0": "tool_choice=required", **later_turns}
    (call,) = call_turn.tool_calls
    assert call.name == "calculator" and call.parse_error is None
    want = evaluate(call.arguments["expression"])
    tool_msgs = [m for m in seg.messages if m.role == "tool"]
    contents = [m.content for m in tool_msgs]  # the agent ran its tool on the call
    assert (contents[:1] if later else contents) == [want]  # `later`: it may call again
    observed = chat.decode(seg.response_ids[call_turn.end : call_turn.obs_end])
    assert want in observed  # and the model was shown the result
    return seg


def train(
    agent: str, out: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, steps: int
) -> list[dict[str, Any]]:
    """`agentrl train --agent AGENT --env math/calc-easy-v0` on the tiny model, run from the
    repository root as the docs say; returns its metrics rows after checking every run was
    trained (no infra failure), made its forced tool call, and was token-exact (the trainer's
    recomputed log-probs are the engine's)."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": str(cache),
        "data.batch_size": 2,
        "rollout.n": 2,
        "rollout.concurrency": 4,
        "trainer.tensorboard": "false",
        "trainer.steps": steps,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 4,
        "trainer.out_dir": str(out),
        "trainer.dump_rollouts_every": 1,
        "sft.steps": 0,
        "data.eval_episodes": 0,
        "rollout.harness.timeout_s": 240,
    }
    args = ["train", "--agent", agent, "--env", "math/calc-easy-v0"]
    assert main([*args, *(f"{k}={v}" for k, v in settings.items())]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["harness/infra_failed"] == 0 and r["harness/episodes"] == 4
        assert r["tool_calls"] >= 4  # every run's first turn called the calculator
        assert r["loss"] == r["loss"]  # finite
        step = out / "rollouts" / f"step_{r['step']:06d}.jsonl"
        for line in step.read_text().splitlines():
            t = json.loads(line)
            assert t["turns"][0]["tool_calls"][0]["name"] == "calculator"
            sampled = [i for i, m in enumerate(t["loss_mask"]) if m]
            lps = t["metadata"]["trainer_logprobs"]
            assert max(abs(t["logprobs"][i] - lps[i]) for i in sampled) < 1e-3
    return rows
