"""`model.kernels: batch_invariant`: the hf engine and the trainer compute the same log-probs
for the same tokens, bit for bit, on CPU.

Real tiny models (float32, one intra-op thread, as the config requires): the engine decodes
several concurrent requests of different lengths, each over two turns with a tool result
appended between them (the second turn reuses the first's KV through its session), and the
trainer recomputes the whole episode in one right-padded batch: `torch.equal` on every sampled
token's log-prob, at temperature 1 and below it. Then a 100-step GRPO run logs a rollout/train
mismatch (`rollout_kl`) of exactly 0.0 at every step, and gradients still flow through the
mode. The default kernels are run beside it to show the test would see a difference.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_synth import train_overrides

from agentrl.config import ConfigError, ModelConfig, TrainConfig, load_config
from agentrl.engines.base import SamplingParams
from agentrl.engines.hf import HFEngine
from agentrl.models.batch_invariant import block_mm, tree_sum
from agentrl.models.load import load_model
from agentrl.trainer.batch import TrainBatch
from agentrl.trainer.logprobs import response_log_probs

PROMPT_LENGTHS = [5, 17, 9, 30, 2]
TOOL_RESULT = [11, 12, 13, 14]


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(path: Path, kernels: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return load_model(ModelConfig(path=str(path), kernels=kernels), trainable=False)


async def _episodes(engine: HFEngine, vocab: int, temperature: float) -> list[Any]:
    prompts = [[(7 * i + 3 * j) % (vocab - 20) + 15 for j in range(n)] for i, n in enumerate(PROMPT_LENGTHS)]  # fmt: skip

    async def episode(i: int, prompt: list[int]) -> tuple[list[int], Any, Any]:
        params = SamplingParams(temperature=temperature, max_new_tokens=6 + i, seed=i)
        first = await engine.generate(prompt, params, session_id=f"s{i}")
        second = prompt + first.token_ids + TOOL_RESULT  # the tool's result, then turn 2
        return prompt, first, await engine.generate(second, params, session_id=f"s{i}")

    try:
        return await asyncio.gather(*(episode(i, p) for i, p in enumerate(prompts)))
    finally:
        await engine.close()


def _train_batch(episodes: list[Any]) -> TrainBatch:
    """The episodes as the trainer sees them: prompt + turn 1 + tool result + turn 2,
    right-padded; the tool result's tokens are not sampled (mask 0)."""
    rows = []
    for prompt, first, second in episodes:
        response = first.token_ids + TOOL_RESULT + second.token_ids
        logps = first.logprobs + [0.0] * len(TOOL_RESULT) + second.logprobs
        mask = [1.0] * len(first.token_ids) + [0.0] * len(TOOL_RESULT) + [1.0] * len(second.token_ids)  # fmt: skip
        rows.append((prompt, response, logps, mask))
    b = len(rows)
    seq = max(len(p) + len(r) for p, r, _, _ in rows)
    width = max(len(r) for _, r, _, _ in rows)
    ids, attn = torch.zeros(b, seq, dtype=torch.long), torch.zeros(b, seq, dtype=torch.long)
    index, resp = torch.full((b, width), -1), torch.zeros(b, width, dtype=torch.long)
    mask, rollout = torch.zeros(b, width), torch.zeros(b, width)
    for i, (p, r, lp, m) in enumerate(rows):
        n = len(p) + len(r)
        ids[i, :n], attn[i, :n] = torch.tensor(p + r), 1
        index[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
        resp[i, : len(r)], mask[i, : len(r)], rollout[i, : len(r)] = (
            torch.tensor(r), torch.tensor(m), torch.tensor(lp),
        )  # fmt: skip
    zeros = torch.zeros(b, width)
    return TrainBatch(
        ids, attn, index, resp, mask, rollout, zeros, zeros.long(), torch.arange(b), torch.zeros(b)
    )


def _engine_vs_trainer(path: Path, kernels: str, temperature: float) -> tuple[Any, Any]:
    model = _model(path, kernels)
    engine = HFEngine(copy.deepcopy(model), [0], max_batch_size=8)  # its own copy, as in a run
    episodes = asyncio.run(_episodes(engine, model.config.vocab_size, temperature))
    batch = _train_batch(episodes)
    with torch.no_grad():
        trainer, _ = response_log_probs(model, batch, temperature)
    sampled = batch.response_mask.bool()
    assert int(sampled.sum()) == sum(len(f.token_ids) + len(s.token_ids) for _, f, s in episodes)
    return trainer[sampled], batch.rollout_log_probs[sampled]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_and_trainer_log_probs_are_bit_identical(
    tiny_model_dir: Path, temperature: float
) -> None:
    trainer, engine = _engine_vs_trainer(tiny_model_dir, "batch_invariant", temperature)
    assert torch.equal(trainer, engine), (trainer - engine).abs().max()


def test_default_kernels_differ_in_the_last_bits(tiny_model_dir: Path) -> None:
    """The same comparison with torch's kernels: close, not equal (so the test above can fail)."""
    trainer, engine = _engine_vs_trainer(tiny_model_dir, "default", 1.0)
    assert not torch.equal(trainer, engine)
    torch.testing.assert_close(trainer, engine, atol=1e-4, rtol=0)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("k", "n"), [(64, 128), (576, 1536), (1536, 576), (576, 4096)])
def test_a_rows_matmul_result_depends_on_that_row_only(k: int, n: int, threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    weight, x = torch.randn(n, k), torch.randn(40, k)
    whole = block_mm(x, weight.t())
    for start, rows in [(0, 1), (3, 1), (7, 2), (11, 17), (20, 20)]:
        assert torch.equal(block_mm(x[start : start + rows], weight.t()), whole[start : start + rows])  # fmt: skip


def test_tree_sum_ignores_trailing_zero_padding() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 13)
    padded = torch.cat([x, torch.zeros(3, 50)], dim=1)
    assert torch.equal(tree_sum(x, -1), tree_sum(padded, -1))


def test_gradients_flow_through_the_mode(tiny_model_dir: Path) -> None:
    model = _model(tiny_model_dir, "batch_invariant").train()
    ids = torch.tensor([[5, 6, 7, 8, 9], [9, 8, 7, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    logits = model(input_ids=ids, attention_mask=attn).logits
    logits.log_softmax(-1)[attn.bool()].sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads if g is not None) > 0


def _exact_overrides(cache: Path, out: Path, **extra: object) -> list[str]:
    return train_overrides(
        cache, out, model__kernels="batch_invariant", trainer__device="cpu",
        trainer__cpu_threads=1, **extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("trainer.packing", "true"),
        ("trainer.cpu_threads", "2"),
        ("model.lora.enabled", "true"),
        ("trainer.update_path", "fused"),
        ("engine.kind", "vllm"),
    ],
)
def test_what_it_is_not_proven_for_is_a_config_error(
    tmp_path: Path, agentrl_cache: Path, key: str, value: str
) -> None:
    from agentrl.assembly.validate import validate

    overrides = _exact_overrides(agentrl_cache, tmp_path) + [f"{key}={value}"]
    with pytest.raises(ConfigError, match=f"batch_invariant with {key}"):
        validate(load_config(TrainConfig, None, overrides))


def test_an_unknown_kernels_value_is_a_config_error(tmp_path: Path, agentrl_cache: Path) -> None:
    with pytest.raises(ConfigError, match="model.kernels"):
        load_config(TrainConfig, None, train_overrides(agentrl_cache, tmp_path, model__kernels="fast"))  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("kernels", "steps"), [("batch_invariant", 100), ("default", 3)])
def test_a_hundred_grpo_steps_have_zero_rollout_train_mismatch(
    tmp_path: Path, agentrl_cache: Path, kernels: str, steps: int
) -> None:
    """100 GRPO steps with every step's rollout-vs-train gap exactly 0; the control: 3 steps
    of the default kernels show a gap in the same metric (so the metric can see one)."""
    from agentrl.assembly import build_trainer

    steps = int(os.environ.get("EXACT_STEPS", steps))
    # An entropy bonus moves the weights every step (a random tiny model earns no reward), so
    # every step's rollout runs on freshly synced weights.
    overrides = train_overrides(
        agentrl_cache, tmp_path, model__kernels=kernels, trainer__device="cpu",
        trainer__cpu_threads=1, trainer__steps=steps, data__eval_episodes=0,
        algorithm__entropy_coef=0.01, data__batch_size=1, sampling__max_new_tokens=6,
        trainer__mini_batch_size=2,
    )  # fmt: skip
    trainer = build_trainer(load_config(TrainConfig, None, overrides))
    trainer.train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    gaps = [r["rollout_logp_absdiff"] for r in rows]
    if kernels == "default":
        assert max(gaps) > 0.0, gaps
        return
    assert gaps == [0.0] * steps
    assert [r["rollout_kl"] for r in rows] == [0.0] * steps
    entropies = [r["entropy"] for r in rows]
    assert len(set(entropies)) > steps // 2, "the policy moved"


@pytest.mark.slow
def test_the_real_smollm2_agrees_bit_for_bit(agentrl_cache: Path) -> None:
    """The pretrained SmolLM2-135M-Instruct (llama, 30 layers, 49k vocabulary), where present:
    the same engine/trainer comparison as the tiny model's."""
    from agentrl.models import gguf

    try:
        path = gguf.resolve_gguf("smollm2-135m-instruct", str(agentrl_cache))
    except (ImportError, FileNotFoundError, OSError) as e:
        pytest.skip(f"SmolLM2 preset not available: {e}")
    trainer, engine = _engine_vs_trainer(Path(path), "batch_invariant", 1.0)
    assert torch.equal(trainer, engine), (trainer - engine).abs().max()
