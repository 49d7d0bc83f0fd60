"""Batched decode in `HFVisionEngine` is exact: the same concurrent seeded requests (images,
different prompt lengths, greedy and sampled, session continuations) give the same tokens and
logprobs with `max_batch_size=1` as with 8, still rescore against a full forward, and one
failing or timed-out request leaves the others untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from PIL import Image

from agentrl.chat import ChatFormat
from agentrl.engines.base import EngineError, GenerateResult, SamplingParams
from agentrl.engines.hf_vision import HFVisionEngine
from agentrl.types import Message

Prompt = tuple[list[int], dict[str, Any] | None]


def _img(w: int, h: int, color: tuple[int, int, int]) -> Image.Image:
    return Image.new("RGB", (w, h), color)


def _prompt(vlm: tuple[Any, Any, Any], msgs: list[Message]) -> Prompt:
    """Expanded prompt ids and the engine's processed pixel inputs (None without images)."""
    _, tok, vp = vlm
    ids = ChatFormat(tok, vision=vp).prompt_ids(msgs, None)
    images = [i for m in msgs for i in m.images]
    if not images:
        return ids, None
    inputs = [vp.process(i) for i in images]
    ids, _ = vp.expand(ids, inputs)
    mm = {
        "pixel_values": torch.cat([i.pixel_values for i in inputs]),
        "image_grid_thw": torch.tensor([list(i.grid_thw) for i in inputs]),
    }
    return ids, mm


def _requests(vlm: tuple[Any, Any, Any]) -> list[tuple[Prompt, SamplingParams]]:
    colors = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (90, 90, 9)]
    specs = [  # (text, images, temperature, top_k, top_p, max_new_tokens)
        ("what is this", [_img(56, 56, colors[0])], 0.0, 0, 1.0, 12),
        ("compare the two pictures please", [_img(56, 56, colors[1]), _img(112, 56, colors[2])],
         1.0, 0, 1.0, 16),
        ("no image here, just a much longer text prompt " * 3, [], 0.7, 20, 1.0, 10),
        ("count", [_img(90, 60, colors[3])], 1.0, 0, 0.9, 20),
        ("hi", [], 1.0, 0, 1.0, 7),
        ("describe", [_img(64, 64, colors[2])], 1.3, 10, 0.95, 14),
    ]  # fmt: skip
    out = []
    for k, (text, imgs, temp, top_k, top_p, n) in enumerate(specs):
        params = SamplingParams(
            max_new_tokens=n, temperature=temp, top_k=top_k, top_p=top_p, seed=100 + k
        )
        out.append((_prompt(vlm, [Message("user", text, images=imgs)]), params))
    return out


async def _gather(engine: HFVisionEngine, reqs: list[Any], sessions: list[str | None]) -> list:
    return await asyncio.gather(
        *(
            engine.generate(ids, p, multimodal=mm, session_id=s)
            for ((ids, mm), p), s in zip(reqs, sessions, strict=True)
        )
    )


def _run_all(vlm: tuple[Any, Any, Any], batch: int) -> tuple[list[Any], list[Any], Any]:
    """Turn 1 of every request concurrently, then a second turn (a new user message with a
    new image) for the first three, as session continuations, concurrently with fresh ones."""
    model, tok, _ = vlm
    engine = HFVisionEngine(model, tok, max_batch_size=batch)
    reqs = _requests(vlm)
    sessions = [f"s{k}" if k < 3 else None for k in range(len(reqs))]
    first = asyncio.run(_gather(engine, reqs, sessions))
    second_reqs = []
    for k, (((ids, mm), p), res) in enumerate(zip(reqs[:3], first, strict=False)):
        new_img = _img(56, 56, (10 * k, 120, 60))
        more, more_mm = _prompt(vlm, [Message("user", f"and now {k}", images=[new_img])])
        grids = [g for g in (mm, more_mm) if g is not None]
        mm2 = {
            "pixel_values": torch.cat([g["pixel_values"] for g in grids]),
            "image_grid_thw": torch.cat([g["image_grid_thw"] for g in grids]),
        }
        p2 = SamplingParams(max_new_tokens=9, temperature=p.temperature or 1.0, seed=7 + k)
        second_reqs.append(((ids + res.token_ids + more, mm2), p2))
    second_reqs += reqs[3:]
    second = asyncio.run(_gather(engine, second_reqs, sessions[:3] + [None] * 3))
    asyncio.run(engine.close())
    return first + second, reqs + second_reqs, engine


def _endless(model: Any, tok: Any, **kw: Any) -> HFVisionEngine:
    """An engine that never stops on EOS, so a long request surely outlives its timeout."""
    engine = HFVisionEngine(model, tok, **kw)
    engine.eos_ids = frozenset()
    return engine


def _rescore(model: Any, ids: list[int], mm: dict[str, Any] | None, res: Any, temp: float) -> float:
    """Max gap between the engine's logprobs and one full forward over prompt + output."""
    full = torch.tensor([ids + res.token_ids])
    kwargs: dict[str, Any] = {}
    if mm is not None:
        kwargs = dict(mm, mm_token_type_ids=(full == model.config.image_token_id).int())
    with torch.no_grad():
        logits = model(input_ids=full, **kwargs).logits[0, len(ids) - 1 : -1].float()
    logp = torch.log_softmax(logits / (temp if temp > 0 else 1.0), dim=-1)
    got = logp.gather(-1, torch.tensor(res.token_ids)[:, None]).squeeze(-1)
    return float((got - torch.tensor(res.logprobs)).abs().max())


def test_batched_decode_matches_one_at_a_time(vlm: tuple[Any, Any, Any]) -> None:
    solo, reqs, solo_engine = _run_all(vlm, 1)
    batched, _, engine = _run_all(vlm, 8)
    assert solo_engine.stats["decode_rows"] == solo_engine.stats["decode_steps"]
    assert engine.stats["decode_rows"] > 2 * engine.stats["decode_steps"]  # really batched
    assert engine.stats["reused_tokens"] > 0  # session turns prefilled only their suffix
    assert engine.stats["reused_tokens"] == solo_engine.stats["reused_tokens"]
    for k, (a, b) in enumerate(zip(solo, batched, strict=True)):
        assert a.error is None and b.error is None, (a.error, b.error)
        assert a.token_ids == b.token_ids, k
        assert a.finish_reason == b.finish_reason
        gap = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0)
        assert gap < 1e-5, (k, gap)
    model = vlm[0]
    for ((ids, mm), p), res in zip(reqs, batched, strict=True):
        assert _rescore(model, ids, mm, res, p.temperature) < 1e-4


def test_failing_or_timed_out_request_leaves_others_alone(vlm: tuple[Any, Any, Any]) -> None:
    model, tok, _ = vlm
    reqs = _requests(vlm)
    (img_ids, img_mm), _ = reqs[0]
    bad_pixels = dict(img_mm, pixel_values=img_mm["pixel_values"][:, :5])  # wrong patch width
    missing = img_ids, None  # image tokens without pixels: an EngineError

    async def scenario(engine: HFVisionEngine, with_bad: bool) -> list[Any]:
        tasks = [engine.generate(ids, p, multimodal=mm) for (ids, mm), p in reqs]
        if with_bad:
            slow = SamplingParams(max_new_tokens=10_000, temperature=1.0, seed=1)
            tasks += [
                engine.generate(img_ids, SamplingParams(seed=2), multimodal=bad_pixels),
                engine.generate(missing[0], SamplingParams(seed=3), multimodal=missing[1]),
                asyncio.wait_for(engine.generate(img_ids, slow, multimodal=img_mm), 0.5),
            ]
        out = await asyncio.gather(*tasks, return_exceptions=True)
        await engine.close()
        return out

    clean = asyncio.run(scenario(_endless(model, tok, max_batch_size=8), False))
    mixed = asyncio.run(scenario(_endless(model, tok, max_batch_size=8), True))
    bad, missing_err, timed_out = mixed[len(reqs) :]
    assert isinstance(bad, GenerateResult) and bad.finish_reason == "error"
    assert isinstance(missing_err, EngineError) and "image tokens" in str(missing_err)
    assert isinstance(timed_out, asyncio.TimeoutError)
    for a, b in zip(clean, mixed[: len(reqs)], strict=True):
        assert a.token_ids == b.token_ids and a.error is None and b.error is None
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


def test_engine_timeout_and_bad_batch_size(vlm: tuple[Any, Any, Any]) -> None:
    model, tok, _ = vlm
    with pytest.raises(ValueError, match="max_batch_size"):
        HFVisionEngine(model, tok, max_batch_size=0)
    engine = _endless(model, tok, request_timeout_s=0.2)
    (ids, mm), _ = _requests(vlm)[0]
    slow = SamplingParams(max_new_tokens=10_000, seed=0)
    quick = SamplingParams(max_new_tokens=3, temperature=0.0)

    async def both() -> list[Any]:
        out = await asyncio.gather(
            engine.generate(ids, slow, multimodal=mm), engine.generate(ids, quick, multimodal=mm)
        )
        await engine.close()
        return out

    late, ok = asyncio.run(both())
    assert late.finish_reason == "abort" and "timed out" in (late.error or "")
    assert ok.finish_reason in ("stop", "length") and ok.error is None


def test_failed_decode_step_fails_its_rows_only(
    vlm: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decode forward that raises resolves that step's rows as errors; the engine serves on."""
    from agentrl.engines import _vision_batch as vb

    model, tok, _ = vlm
    engine = _endless(model, tok)
    (ids, mm), _ = _requests(vlm)[0]
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    real = vb.decode

    def broken(*a: Any) -> Any:
        monkeypatch.setattr(vb, "decode", real)
        raise RuntimeError("boom")

    monkeypatch.setattr(vb, "decode", broken)

    async def go() -> tuple[Any, Any]:
        failed = await engine.generate(ids, params, multimodal=mm)
        ok = await engine.generate(ids, params, multimodal=mm)
        await engine.close()
        return failed, ok

    failed, ok = asyncio.run(go())
    assert failed.finish_reason == "error" and "boom" in (failed.error or "")
    assert ok.error is None and len(ok.token_ids) == 4
    assert engine.stats["failed_steps"] == 1


def test_bad_update_weights_changes_nothing_and_engine_serves(vlm: tuple[Any, Any, Any]) -> None:
    """A valid tensor listed before a wrong-shaped one: the update is refused as a whole, no
    weight moves (docs/engines.md), and the engine answers exactly as before."""
    import copy

    model, tok = copy.deepcopy(vlm[0]), vlm[1]
    engine = HFVisionEngine(model, tok)
    (ids, mm), _ = _requests(vlm)[0]
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = model.state_dict()
    first, second = list(state)[:2]
    good = (first, state[first] + 1.0)  # a copy loop that checks as it goes would apply this
    bad = (second, torch.zeros(*state[second].shape, 2))

    async def go() -> tuple[Any, Any]:
        old = await engine.generate(ids, params, multimodal=mm, session_id="s")
        with pytest.raises(EngineError, match="shape mismatch"):
            engine.update_weights([good, bad])
        again = await engine.generate(ids, params, multimodal=mm)
        await engine.close()
        return old, again

    old, again = asyncio.run(go())
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert again.error is None and again.token_ids == old.token_ids
    assert again.logprobs == pytest.approx(old.logprobs, abs=1e-6)
