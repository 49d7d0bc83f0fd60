"""`VLLMServerEngine`: a running vLLM server (`vllm serve`, or `vllm_server.LocalVLLMServer`)
as the rollout engine over HTTP, token ids in and out, weights pushed by agentrl.

Two paths, chosen once per engine from what the server offers (`rl_api`, on the first
request or update; one log line names the path and why):

- native (a vLLM >= 0.32 server started as docs/engines.md says): requests go to the
  token-in/token-out route `/inference/v1/generate` (on with `--enable-scale-out`), whose
  answer labels each token with the weights that sampled it (`weight_versions` spans). An
  update is `/pause?mode=keep` (the running requests stay in the engine), vLLM's weight
  transfer in its phases (`/start_weight_update`, `/update_weights` naming a safetensors
  file in `weight_sync_dir` for agentrl's `agentrl_file` backend, `/finish_weight_update`
  with the new version's label), `/reset_prefix_cache?reset_running_requests=true` (the
  paused requests' KV is recomputed under the new weights when they resume), `/resume`.
  Nothing is aborted or sent twice; each token's version is vLLM's own label.
- fallback (an older server, or one started without those flags): `/v1/completions` with
  token-id prompts, and an update pauses in mode "abort", reloads through agentrl's worker
  extension (`/collective_rpc`) and continues each interrupted request as a new segment
  (`_versioned`), the stamps as exact.

The RL routes, `/collective_rpc` and `/reset_prefix_cache` exist only with
`VLLM_SERVER_DEV_MODE=1`: bind such a server to loopback or a trusted network. The versions
count this client's updates: one trainer per server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from agentrl.engines._remote import HTTPServerEngine, cpu_tensors
from agentrl.engines._versioned import VersionedRequests, segment_seed
from agentrl.engines._vllm_io import (
    from_completions_response,
    from_generate_response,
    to_completions_payload,
    to_generate_payload,
)
from agentrl.engines.base import EngineError, GenerateResult, SamplingParams, error_result
from agentrl.engines.vllm_platform import check_weights, checkpoint_shapes

log = logging.getLogger(__name__)

# What the native path uses of a server: present in its OpenAPI schema exactly when the
# server has vLLM's RL routes (dev mode) and the token route (`--enable-scale-out`).
NATIVE_ROUTES = (
    "/inference/v1/generate",
    "/pause",
    "/resume",
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/reset_prefix_cache",
)


class VLLMServerEngine(HTTPServerEngine):
    """A running vLLM OpenAI-compatible server reached over HTTP (module docstring).
    `sleep_mode`: whether the server was started with `--enable-sleep-mode` (a CPU server
    cannot be); without it `sleep`/`wake` are no-ops. `native`: None to detect the path
    from the server, False to take the fallback whatever the server has."""

    features = frozenset({"weight_versions"})

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        weight_sync_dir: str = "",
        timeout_s: float = 600.0,
        request_timeout_s: float | None = None,
        sleep_mode: bool = False,
        client: Any = None,
        native: bool | None = None,
    ) -> None:
        super().__init__(
            base_url,
            weight_sync_dir=weight_sync_dir,
            timeout_s=timeout_s,
            request_timeout_s=request_timeout_s,
            client=client,
        )
        self.model = model
        self.sleep_mode = sleep_mode
        self.can_sleep = sleep_mode  # text-only (multimodal_inputs "none")
        self.expected_weights = checkpoint_shapes(model)
        self._requests = VersionedRequests()
        self._paused = False
        self.native = native  # decided by `rl_api` (once) unless given
        self._detecting: asyncio.Lock | None = None

    @property
    def weight_version(self) -> int:
        return self._requests.version

    @property
    def pause_mode(self) -> str:
        """How an update stops the running requests: "keep" on the native path, else
        "abort" (also before the path is decided)."""
        return "keep" if self.native else "abort"

    async def rl_api(self) -> bool:
        """Whether this server takes the native path (module docstring), decided once, on
        the engine loop: its OpenAPI schema lists `NATIVE_ROUTES` and its weight-transfer
        engine initialises (it does when the server was started with agentrl's
        `--weight-transfer-config`). A server that cannot be reached raises (the caller's
        request fails) and is asked again next time."""
        if self.native is not None:
            return self.native
        if self._detecting is None:
            self._detecting = asyncio.Lock()
        async with self._detecting:
            if self.native is None:
                self.native, why = await self._detect()
                log.info(
                    "vLLM server %s: %s (%s)",
                    self.base_url,
                    "native RL API: token route, pause mode keep, weight transfer (agentrl_file)"
                    if self.native
                    else "fallback: /v1/completions, pause mode abort + segments, /collective_rpc",
                    why,
                )
        return self.native

    async def _detect(self) -> tuple[bool, str]:
        resp = await self.client.get(f"{self.base_url}/openapi.json", timeout=self.timeout_s)
        paths = set(resp.json().get("paths", {})) if resp.status_code == 200 else set()
        missing = [p for p in NATIVE_ROUTES if p not in paths]
        if missing:
            return False, f"the server lacks {missing[:3]}"
        init = await self._send("/init_weight_transfer_engine", {"init_info": {}})
        if init.status_code >= 400:
            return False, (
                f"/init_weight_transfer_engine: HTTP {init.status_code} (start the server with "
                '--weight-transfer-config \'{"backend": "agentrl_file"}\' and agentrl\'s '
                "--worker-extension-cls)"
            )
        return True, "all its routes answered"

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
        body = to_completions_payload(self.model, prompt_ids, params)
        request_id = f"agentrl-{uuid.uuid4().hex}"

        async def segment(done: list[int], left: int, sid: str, part: int) -> GenerateResult:
            seed = segment_seed(params.seed, part)
            try:
                native = await self.rl_api()
            except Exception as exc:  # an unreachable server: the request's error
                return error_result(exc)
            if native:
                payload = to_generate_payload(self.model, [*prompt_ids, *done], params, left, seed)
                return await self._round_trip(
                    "/inference/v1/generate", payload, from_generate_response
                )
            payload = dict(body, prompt=body["prompt"] + done, max_tokens=left)
            if seed is not None:
                payload["seed"] = seed
            return await self._round_trip("/v1/completions", payload, from_completions_response)

        budget = params.max_new_tokens
        return await self._loop.call(self._requests.generate(segment, budget, request_id))

    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Write a safetensors file into `weight_sync_dir` (which the server must see), pause
        the server, have its workers load the file (module docstring: native or fallback),
        resume, delete the file."""
        tensors = cpu_tensors(named_tensors)
        check_weights(tensors, self.expected_weights)
        path = self._save_weights(tensors.items())

        async def call() -> None:
            if await self.rl_api():
                await self._update_native(path)
            else:
                await self._update_fallback(path)

        try:
            self._loop.admin(call, self.timeout_s, "vLLM server update_weights")
        finally:
            os.unlink(path)

    async def _update_native(self, path: str) -> None:
        async def load() -> None:
            await self._post("/start_weight_update")
            await self._post("/update_weights", {"update_info": {"path": path}})
            version = str(self._requests.version + 1)
            await self._post("/finish_weight_update", {"weight_version": version})
            reset = await self._post(
                "/reset_prefix_cache", params={"reset_running_requests": "true"}
            )
            if not (reset or {}).get("success"):
                raise EngineError(f"{self.base_url}/reset_prefix_cache failed: {reset}")

        async def noop(_: list[str]) -> None:
            return None

        await self._requests.update(
            pause=lambda: self._pause("keep"), abort=noop, load=load, resume=self._resume,
            drain_timeout_s=self.timeout_s / 2, drain=False,
        )  # fmt: skip

    async def _update_fallback(self, path: str) -> None:
        rpc = {"method": "agentrl_load_weights_file", "args": [path]}

        async def load() -> None:
            await self._post("/collective_rpc", rpc)
            await self._post("/reset_prefix_cache")

        async def abort(_: list[str]) -> None:
            await self._post("/abort_requests", {})  # all: the server's ids are not ours

        await self._requests.update(
            pause=lambda: self._pause("abort"), abort=abort, load=load, resume=self._resume,
            drain_timeout_s=self.timeout_s / 2,
        )  # fmt: skip

    async def _pause(self, mode: str) -> None:
        """`/pause?mode=...`. A server without it (an older vLLM, or no dev mode) can still
        take weights while nothing runs, as the synchronous loop does. Counted as paused
        from the moment it is sent, so that `_resume` undoes a pause whose answer was lost."""
        self._paused = True
        resp = await self._send("/pause", params={"mode": mode})
        if resp.status_code in (404, 405):
            self._paused = False
            if not self._requests.inflight:
                return
            raise EngineError(
                f"{self.base_url}/pause: HTTP {resp.status_code}: a weight update while "
                "requests run needs vLLM's /pause (a recent vLLM, VLLM_SERVER_DEV_MODE=1)"
            )
        if resp.status_code >= 400:
            raise EngineError(f"{self.base_url}/pause: HTTP {resp.status_code}: {resp.text[:300]}")

    async def _resume(self) -> None:
        if self._paused:
            await self._post("/resume")
            self._paused = False

    def sleep(self) -> None:
        if self.sleep_mode:
            self._admin_post("/sleep", params={"level": 1})

    def wake(self) -> None:
        if self.sleep_mode:
            self._admin_post("/wake_up")
