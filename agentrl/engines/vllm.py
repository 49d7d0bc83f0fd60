"""vLLM adapters: in-process `AsyncLLM` (`VLLMEngine`) and an OpenAI-compatible server
(`VLLMServerEngine`), both token ids in / token ids + logprobs out.

NOT RUN HERE: vLLM needs a CUDA GPU and was not installed on the machines this was written
on. The code follows vLLM's documented APIs (v1 `AsyncLLM.generate(TokensPrompt, SamplingParams,
request_id)`, `collective_rpc`, `sleep`/`wake_up`, `/v1/completions` with token-id prompts);
the translations below are unit-tested against recorded-shape fakes, and server mode against
a fake HTTP server, but no real vLLM process has exercised this file.

Logprobs: vLLM's default `logprobs_mode="raw_logprobs"` reports log p under the *untempered*
logits; agentrl's contract is temperature-scaled. `build_vllm` therefore starts the engine
with `logprobs_mode="processed_logprobs"` (identical to ours whenever top-k/top-p are off).

Weight sync: vLLM workers get `WeightSyncExtension` (see `vllm_worker`) via
`worker_extension_cls`; `update_weights` calls its methods through `collective_rpc`
(tensors in-process, a safetensors file for a server started with that extension and
`VLLM_SERVER_DEV_MODE=1`).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl.engines._remote import AdminCalls, HTTPServerEngine
from agentrl.engines.base import (
    Engine,
    EngineError,
    FinishReason,
    GenerateResult,
    SamplingParams,
    error_result,
)

WORKER_EXTENSION = "agentrl.engines.vllm_worker.WeightSyncExtension"
_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


# ---------------------------------------------------------------- pure translations


def to_vllm_sampling(params: SamplingParams) -> dict[str, Any]:
    """Our SamplingParams → kwargs for `vllm.SamplingParams` (one sample, sampled logprob)."""
    return {
        "n": 1,
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "stop": list(params.stop),
        "stop_token_ids": list(params.stop_token_ids),
        "seed": params.seed,
        "logprobs": 0,  # the sampled token's logprob only
        "include_stop_str_in_output": True,  # keep what the model sampled
        "skip_special_tokens": False,
    }


def to_vllm_prompt(prompt_ids: Sequence[int], multimodal: dict[str, Any] | None) -> dict[str, Any]:
    """A `TokensPrompt` (a TypedDict, so a plain dict) with optional `multi_modal_data`."""
    prompt: dict[str, Any] = {"prompt_token_ids": [int(t) for t in prompt_ids]}
    if multimodal:
        prompt["multi_modal_data"] = multimodal
    return prompt


def from_vllm_output(output: Any) -> GenerateResult:
    """A final `RequestOutput` → GenerateResult (logprob of each sampled id from its dict)."""
    completion = output.outputs[0]
    ids = [int(t) for t in completion.token_ids]
    if completion.logprobs is None:
        raise EngineError("vLLM returned no logprobs (SamplingParams.logprobs must be set)")
    if len(completion.logprobs) != len(ids):
        raise EngineError(f"vLLM returned {len(completion.logprobs)} logprobs for {len(ids)} ids")
    logprobs = [
        float(step[tok].logprob) for tok, step in zip(ids, completion.logprobs, strict=True)
    ]
    return GenerateResult(ids, logprobs, _FINISH.get(completion.finish_reason, "error"))


def to_completions_payload(
    model: str, prompt_ids: Sequence[int], params: SamplingParams
) -> dict[str, Any]:
    """Body for vLLM's `/v1/completions` with a token-id prompt."""
    body = to_vllm_sampling(params)
    del body["n"]
    body.update(
        model=model,
        prompt=[int(t) for t in prompt_ids],
        logprobs=0,
        return_tokens_as_token_ids=True,  # logprobs.tokens become "token_id:<id>"
        return_token_ids=True,  # newer vLLM: choices[0].token_ids
    )
    if body["seed"] is None:
        del body["seed"]
    return body


def from_completions_response(body: dict[str, Any]) -> GenerateResult:
    """`/v1/completions` JSON → GenerateResult; ids from `token_ids` or "token_id:N" tokens."""
    choice = body["choices"][0]
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None:
        ids = [int(str(t).split("token_id:", 1)[1]) for t in lp.get("tokens", [])]
    logprobs = [float(x) for x in lp.get("token_logprobs") or []]
    if len(logprobs) != len(ids):
        raise EngineError(f"server returned {len(logprobs)} logprobs for {len(ids)} tokens")
    return GenerateResult(
        [int(t) for t in ids], logprobs, _FINISH.get(choice.get("finish_reason"), "error")
    )


# ---------------------------------------------------------------- engines


class VLLMEngine(Engine):
    """In-process vLLM. `llm` is an `AsyncLLM`; `sampling_cls` is `vllm.SamplingParams`."""

    def __init__(self, llm: Any, sampling_cls: Any, *, admin_timeout_s: float = 600.0) -> None:
        self.llm = llm
        self.sampling_cls = sampling_cls
        self._admin = AdminCalls(admin_timeout_s)
        self._ids = itertools.count()

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        # session_id needs no handling: vLLM's automatic prefix caching reuses shared prefixes.
        self._admin.bind()
        await self._admin.drain()
        request_id = f"agentrl-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        final = None
        try:
            sampling = self.sampling_cls(**to_vllm_sampling(params))
            prompt = to_vllm_prompt(prompt_ids, multimodal)
            async for out in self.llm.generate(prompt, sampling, request_id):
                final = out
        except Exception as exc:  # engine errors are recorded on the trajectory
            return error_result(exc)
        if final is None:
            return GenerateResult([], [], "error", "vLLM produced no output")
        return from_vllm_output(final)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        items = list(named_tensors)

        async def call() -> None:
            await self.llm.collective_rpc("agentrl_load_weights", args=(items,))
            await self.llm.reset_prefix_cache()

        self._admin.run(call)

    def sleep(self) -> None:
        self._admin.run(lambda: self.llm.sleep(level=1))

    def wake(self) -> None:
        self._admin.run(lambda: self.llm.wake_up())

    async def close(self) -> None:
        await self._admin.drain()
        self.llm.shutdown()


class VLLMServerEngine(HTTPServerEngine):
    """A running `vllm serve` (OpenAI-compatible) reached over HTTP."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        weight_sync_dir: str = "",
        timeout_s: float = 600.0,
        client: Any = None,
    ) -> None:
        super().__init__(
            base_url, weight_sync_dir=weight_sync_dir, timeout_s=timeout_s, client=client
        )
        self.model = model

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        if multimodal:
            raise EngineError("vllm server mode takes images via chat messages; not supported")
        return await self._generate_via(
            "/v1/completions",
            lambda: to_completions_payload(self.model, prompt_ids, params),
            from_completions_response,
        )

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        path = self._save_weights(named_tensors)
        rpc = {"method": "agentrl_load_weights_file", "args": [path]}

        async def call() -> None:
            await self._post("/collective_rpc", rpc)
            await self._post("/reset_prefix_cache")

        self._admin.run(call)

    def sleep(self) -> None:
        self._admin_post("/sleep", params={"level": 1})

    def wake(self) -> None:
        self._admin_post("/wake_up")


def build_vllm(cfg: Any, model: Any, tokenizer: Any) -> Engine:
    """Engine for `engine.kind: vllm`: server mode if `cfg.server_url`, else in-process.

    `model` is the checkpoint path (a string) for in-process mode, or the served model name.
    """
    extra = dict(cfg.extra)
    if cfg.server_url:
        return VLLMServerEngine(
            cfg.server_url,
            extra.pop("served_model_name", str(model)),
            weight_sync_dir=extra.pop("weight_sync_dir", ""),
        )
    try:
        import vllm
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise EngineError("engine.kind=vllm needs `pip install agentrl[vllm]`") from exc
    if not isinstance(model, str):
        raise EngineError("in-process vLLM loads from a checkpoint path; pass model.path")
    args = vllm.AsyncEngineArgs(
        model=model,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        enable_sleep_mode=True,
        enable_prefix_caching=True,
        worker_extension_cls=WORKER_EXTENSION,
        logprobs_mode=extra.pop("logprobs_mode", "processed_logprobs"),
        **extra,
    )
    return VLLMEngine(AsyncLLM.from_engine_args(args), vllm.SamplingParams)


# `engine.extra` keys `build_vllm` takes. Server mode: these two. In-process: `logprobs_mode`
# plus any `vllm.AsyncEngineArgs` field it does not set itself.
SERVER_EXTRA_KEYS = frozenset({"served_model_name", "weight_sync_dir"})
_SET_BY_BUILDER = {
    "model",
    "gpu_memory_utilization",
    "enable_sleep_mode",
    "enable_prefix_caching",
    "worker_extension_cls",
}


def extra_keys(cfg: Any) -> frozenset[str] | None:
    """The `engine.extra` keys `build_vllm` accepts for `cfg` (None: vLLM is not installed,
    so its engine arguments cannot be listed; `build_vllm` then says what to install)."""
    if cfg.server_url:
        return SERVER_EXTRA_KEYS
    try:
        import dataclasses

        import vllm
    except ImportError:
        return None
    names = {f.name for f in dataclasses.fields(vllm.AsyncEngineArgs)}
    return frozenset((names - _SET_BY_BUILDER) | {"logprobs_mode"})
