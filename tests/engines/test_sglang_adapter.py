"""SGLang adapter: translations against recorded-shape fakes, server mode against a fake
HTTP server on 127.0.0.1. The real-engine test only runs where SGLang and a GPU exist."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest
import torch
from engine_fakes import (
    SCRIPT_IDS,
    SCRIPT_LOGPROBS,
    FakeHTTPServer,
    FakeSGLangEngine,
    fake_sglang_result,
)

from agentrl.config.schema import EngineConfig
from agentrl.engines import EngineError, SamplingParams, build_engine
from agentrl.engines.sglang import (
    SGLangEngine,
    SGLangServerEngine,
    from_sglang_output,
    to_sglang_request,
    to_sglang_sampling,
)

PARAMS = SamplingParams(max_new_tokens=9, temperature=0.0, top_k=4, stop_token_ids=[2], seed=5)


def test_sampling_and_request_translation() -> None:
    sp = to_sglang_sampling(PARAMS)
    assert sp["max_new_tokens"] == 9 and sp["temperature"] == 0.0 and sp["top_k"] == 4
    assert sp["stop_token_ids"] == [2] and sp["sampling_seed"] == 5 and sp["no_stop_trim"]
    assert to_sglang_sampling(SamplingParams())["top_k"] == -1
    assert "sampling_seed" not in to_sglang_sampling(SamplingParams())
    req = to_sglang_request([1, 2], PARAMS, {"image": ["img"]})
    assert req["input_ids"] == [1, 2] and req["return_logprob"] is True
    assert req["image_data"] == ["img"]
    with pytest.raises(EngineError):
        to_sglang_request([1], PARAMS, {"audio": 1})


def test_output_translation() -> None:
    res = from_sglang_output(fake_sglang_result())
    assert res.token_ids == SCRIPT_IDS and res.logprobs == SCRIPT_LOGPROBS
    assert res.finish_reason == "stop" and res.error is None
    length = from_sglang_output(fake_sglang_result({"type": "length", "length": 3}))
    assert length.finish_reason == "length"
    aborted = from_sglang_output(fake_sglang_result({"type": "abort", "message": "oom"}))
    assert aborted.finish_reason == "abort" and aborted.error == "oom"
    with pytest.raises(EngineError):
        from_sglang_output({"meta_info": {}})


def test_in_process_engine_with_fake_sglang() -> None:
    fake = FakeSGLangEngine()
    engine = SGLangEngine(fake)
    res = asyncio.run(engine.generate([3, 4], PARAMS, multimodal={"image": "i"}))
    assert res.token_ids == SCRIPT_IDS
    engine.update_weights([("w", torch.zeros(1))])
    engine.sleep()
    engine.wake()
    kwargs = fake.calls[0][1]
    assert kwargs["input_ids"] == [3, 4] and kwargs["image_data"] == "i"
    assert [c[0] for c in fake.calls[1:]] == [
        "update_weights_from_tensor",
        "release_memory_occupation",
        "resume_memory_occupation",
    ]

    async def inside_loop() -> None:
        engine.update_weights([("w", torch.zeros(1))])

    with pytest.raises(EngineError):
        asyncio.run(inside_loop())


def test_server_mode_against_fake_sglang_server(tmp_path: Any) -> None:
    routes = {
        "/generate": (200, fake_sglang_result()),
        "/update_weights_from_disk": (200, {"success": True, "message": ""}),
        "/release_memory_occupation": (200, {}),
        "/resume_memory_occupation": (200, {}),
    }
    with FakeHTTPServer(routes) as server:
        engine = SGLangServerEngine(server.url, weight_sync_dir=str(tmp_path))

        async def body() -> Any:
            res = await engine.generate([7, 8], PARAMS)
            engine.update_weights([("lm_head.weight", torch.ones(2))])
            engine.sleep()
            engine.wake()
            again = await engine.generate([7], PARAMS)
            await engine.close()
            return res, again

        res, again = asyncio.run(body())
    assert res.token_ids == SCRIPT_IDS and again.logprobs == SCRIPT_LOGPROBS
    assert [p for p, _ in server.requests] == [
        "/generate",
        "/update_weights_from_disk",
        "/release_memory_occupation",
        "/resume_memory_occupation",
        "/generate",
    ]
    assert server.requests[0][1]["input_ids"] == [7, 8]
    assert server.requests[1][1]["model_path"] == str(tmp_path)
    assert (tmp_path / "model.safetensors").exists()


def test_build_engine_sglang_server_mode() -> None:
    cfg = EngineConfig(kind="sglang", server_url="http://127.0.0.1:9/")
    engine = build_engine(cfg, "/ckpt", None)
    assert isinstance(engine, SGLangServerEngine) and engine.base_url == "http://127.0.0.1:9"


_HAS_SGLANG = importlib.util.find_spec("sglang") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not (_HAS_SGLANG and torch.cuda.is_available()), reason="needs sglang + GPU")
def test_real_sglang_matches_hf_rescore() -> None:
    from engine_helpers import real_engine_vs_rescore

    res, expected = real_engine_vs_rescore("sglang")
    assert res.logprobs == pytest.approx(expected, abs=1e-2)
