"""SGLang adapters: in-process `sgl.Engine` (`SGLangEngine`) and a running server's native
`/generate` endpoint (`SGLangServerEngine`), token ids in / token ids + logprobs out.

NOT RUN HERE: SGLang cannot be installed on these machines (the CUDA-only `sglang-kernel`, a
torch 2.14.1 pin, no CPU build on PyPI). The code follows SGLang's documented APIs (`Engine.async_generate(input_ids=...,
sampling_params=..., return_logprob=True, image_data=...)` with
`meta_info["output_token_logprobs"]` as (logprob, token_id, text) triples,
`update_weights_from_tensor`, `release_memory_occupation` / `resume_memory_occupation`,
server `/generate`, `/update_weights_from_disk`); translations are unit-tested against
recorded-shape fakes and server mode against a fake HTTP server only. What running the vLLM
adapter against real vLLM taught is applied here too: the server mode shares
`HTTPServerEngine` (engine-owned loop, timeouts, errors recorded), weight files are written
with tied tensors cloned (`_remote.save_weights`), and every engine argument can be
overridden from `engine.extra`.

Logprobs: SGLang's sampler reports log p under the temperature-scaled distribution before
top-k/top-p, which is agentrl's contract (setting `SGLANG_RETURN_ORIGINAL_LOGPROB=1` on the
server would break it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl.config.engine import EngineConfig
from agentrl.engines._remote import HTTPServerEngine
from agentrl.engines.base import (
    Engine,
    EngineError,
    FinishReason,
    GenerateResult,
    SamplingParams,
    error_result,
)

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


# ---------------------------------------------------------------- pure translations


def to_sglang_sampling(params: SamplingParams) -> dict[str, Any]:
    """Our SamplingParams → SGLang's `sampling_params` dict."""
    out: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "stop": list(params.stop),
        "stop_token_ids": list(params.stop_token_ids),
        "skip_special_tokens": False,
        "no_stop_trim": True,  # keep what the model sampled
    }
    if params.seed is not None:
        out["sampling_seed"] = params.seed
    return out


def to_sglang_request(
    prompt_ids: Sequence[int], params: SamplingParams, multimodal: dict[str, Any] | None
) -> dict[str, Any]:
    """Keyword arguments of `Engine.async_generate`, also the JSON body of `/generate`."""
    req: dict[str, Any] = {
        "input_ids": [int(t) for t in prompt_ids],
        "sampling_params": to_sglang_sampling(params),
        "return_logprob": True,
    }
    if multimodal:
        if set(multimodal) - {"image", "image_data"}:
            raise EngineError(f"sglang adapter takes images only, got {sorted(multimodal)}")
        req["image_data"] = multimodal.get("image_data", multimodal.get("image"))
    return req


def from_sglang_output(out: dict[str, Any]) -> GenerateResult:
    """An `async_generate` / `/generate` result → GenerateResult."""
    meta = out.get("meta_info") or {}
    triples = meta.get("output_token_logprobs")
    if triples is None:
        raise EngineError("SGLang returned no output_token_logprobs (return_logprob unset?)")
    ids = [int(t[1]) for t in triples]
    logprobs = [float(t[0]) for t in triples]
    if "output_ids" in out and list(out["output_ids"]) != ids:
        raise EngineError("SGLang output_ids disagree with output_token_logprobs")
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else finish
    reason = _FINISH.get(kind, "error")
    error = finish.get("message") if isinstance(finish, dict) and reason != "stop" else None
    return GenerateResult(ids, logprobs, reason, error)


# ---------------------------------------------------------------- engines


class SGLangEngine(Engine):
    """In-process SGLang (`sglang.Engine`)."""

    multimodal_inputs = "images"  # `image_data`: SGLang runs the model's own processor
    can_sleep = True  # release_memory_occupation / resume_memory_occupation

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        # session_id needs no handling: SGLang's radix cache reuses shared prefixes.
        request = to_sglang_request(prompt_ids, params, multimodal)
        try:
            out = await self.engine.async_generate(**request)
        except Exception as exc:
            return error_result(exc)
        return from_sglang_output(out)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        _outside_loop("update_weights")
        self.engine.update_weights_from_tensor(named_tensors=list(named_tensors))

    def sleep(self) -> None:
        _outside_loop("sleep")
        self.engine.release_memory_occupation()

    def wake(self) -> None:
        _outside_loop("wake")
        self.engine.resume_memory_occupation()

    async def close(self) -> None:
        self.engine.shutdown()


def _outside_loop(what: str) -> None:
    """sgl.Engine's admin methods drive their own event loop; they cannot nest in ours."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise EngineError(f"SGLangEngine.{what}() must be called outside a running event loop")


class SGLangServerEngine(HTTPServerEngine):
    """A running `python -m sglang.launch_server` reached over HTTP."""

    multimodal_inputs = "images"
    can_sleep = True

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        return await self._generate_via(
            "/generate",
            lambda: to_sglang_request(prompt_ids, params, multimodal),
            from_sglang_output,
        )

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Write the tensors into `weight_sync_dir` (a checkpoint dir with config.json) and
        ask the server to reload from it."""
        self._save_weights(named_tensors, "model.safetensors")
        body = {"model_path": self.weight_sync_dir, "flush_cache": True}
        self._admin_post("/update_weights_from_disk", body)

    def sleep(self) -> None:
        self._admin_post("/release_memory_occupation", {})

    def wake(self) -> None:
        self._admin_post("/resume_memory_occupation", {})


def build_sglang(cfg: EngineConfig, model: Any, tokenizer: Any, dtype: str | None = None) -> Engine:
    """Engine for `engine.kind: sglang`: server mode if `cfg.server_url`, else in-process;
    `dtype` (the trainer's) is the in-process engine's unless `engine.extra` sets one."""
    extra = dict(cfg.extra)
    if cfg.server_url:
        return SGLangServerEngine(cfg.server_url, weight_sync_dir=extra.pop("weight_sync_dir", ""))
    try:
        import sglang
    except ImportError as exc:
        raise EngineError("engine.kind=sglang needs `pip install agentrl[sglang]`") from exc
    if not isinstance(model, str):
        raise EngineError("in-process SGLang loads from a checkpoint path; pass model.path")
    # Defaults first, `engine.extra` overriding any of them (what vLLM's hard-coded
    # enable_sleep_mode taught: a platform without the feature must be able to turn it off).
    kwargs = {
        "model_path": model,
        "mem_fraction_static": cfg.gpu_memory_utilization,
        "enable_memory_saver": True,
    }
    if dtype is not None:  # SGLang's "auto" downcasts fp32 like vLLM's (engines/build.py)
        kwargs["dtype"] = dtype
    kwargs.update(extra)
    return SGLangEngine(sglang.Engine(**kwargs))


# `engine.extra` keys `build_sglang` takes. Server mode: `weight_sync_dir`. In-process: any
# `sglang.srt.server_args.ServerArgs` field (they override agentrl's defaults).
SERVER_EXTRA_KEYS = frozenset({"weight_sync_dir"})


def extra_keys(cfg: EngineConfig) -> frozenset[str] | None:
    """The `engine.extra` keys `build_sglang` accepts for `cfg` (None: SGLang is not
    installed, so its server arguments cannot be listed)."""
    if cfg.server_url:
        return SERVER_EXTRA_KEYS
    try:
        import dataclasses

        from sglang.srt.server_args import ServerArgs
    except ImportError:
        return None
    return frozenset({f.name for f in dataclasses.fields(ServerArgs)} - {"model_path"})
