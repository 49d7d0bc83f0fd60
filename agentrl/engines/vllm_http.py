"""`VLLMServerEngine`: a running vLLM server (`vllm serve`, or `vllm_server.LocalVLLMServer`)
as the rollout engine over HTTP, token ids in and out, weights pushed by agentrl.

The weight-sync path (`_vllm_sync`) is chosen once per engine from what the server offers
(`sync_path`, on the first request or update; one log line names the path and why):

- weights: a server with vLLM's weight-transfer routes whose transfer engine initialises
  (0.26.0 or 0.32, started as docs/engines.md says, with agentrl's `--weight-transfer-config`)
  takes vLLM's phases (`/start_weight_update`, `/update_weights` naming a safetensors file in
  `weight_sync_dir` for agentrl's `agentrl_file` backend, `/finish_weight_update`); any other
  reloads through agentrl's worker extension (`/collective_rpc`).
- pause "keep" (a 0.32 server: its token route `/inference/v1/generate`, on with
  `--enable-scale-out`, labels each token with the weights that sampled it, `weight_versions`
  spans in its OpenAPI schema): requests go to the token route; an update is
  `/pause?mode=keep` (the running requests stay in the engine), the phases with the new
  version's label, `/reset_prefix_cache?reset_running_requests=true` (the paused requests'
  KV is recomputed under the new weights when they resume), `/resume`. Nothing is aborted or
  sent twice; each token's version is vLLM's own label.
- pause "abort" (any other): `/v1/completions` with token-id prompts; an update pauses in
  mode "abort", loads, drops the prefix cache and continues each interrupted request as a
  new segment (`_versioned`), the stamps as exact.

The RL routes, `/collective_rpc` and `/reset_prefix_cache` exist only with
`VLLM_SERVER_DEV_MODE=1`: bind such a server to loopback or a trusted network. The versions
count this client's updates: one trainer per server.
"""

from __future__ import annotations

import asyncio
import json
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
from agentrl.engines._vllm_sync import SyncPath, choose
from agentrl.engines.base import EngineError, GenerateResult, SamplingParams, error_result
from agentrl.engines.vllm_platform import check_weights, checkpoint_shapes

log = logging.getLogger(__name__)

# What each native fact needs of a server: routes in its OpenAPI schema (dev mode gives the
# RL routes; `--enable-scale-out` the token route), and for labels the token route's answer
# carrying `weight_versions` (vLLM 0.32; 0.26.0 has the route without labels).
TRANSFER_ROUTES = (
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
)
KEEP_ROUTES = ("/inference/v1/generate", "/pause", "/resume", "/reset_prefix_cache")


def schema_facts(schema: dict[str, Any]) -> tuple[list[str], list[str], bool]:
    """What a server's OpenAPI schema says of the two facts (`_vllm_sync`): the weight-transfer
    routes it lacks, the routes of pause mode keep it lacks, and whether its token route
    labels tokens. Read by the engine (`VLLMServerEngine.sync_path`) and `agentrl doctor`."""
    paths = set(schema.get("paths", {}))
    labels = "weight_versions" in json.dumps(schema.get("components", {}))
    return (
        [p for p in TRANSFER_ROUTES if p not in paths],
        [p for p in KEEP_ROUTES if p not in paths],
        labels,
    )


class VLLMServerEngine(HTTPServerEngine):
    """A running vLLM OpenAI-compatible server reached over HTTP (module docstring).
    `sleep_mode`: whether the server was started with `--enable-sleep-mode` (a CPU server
    cannot be); without it `sleep`/`wake` are no-ops. `sync`: None to choose the path from
    the server (module docstring), or a `SyncPath` to take whatever the server has (native
    transfer only for a server whose transfer engine is initialised)."""

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
        sync: SyncPath | None = None,
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
        self.sync = sync  # chosen by `sync_path` (once) unless given
        self._detecting: asyncio.Lock | None = None

    @property
    def weight_version(self) -> int:
        return self._requests.version

    @property
    def pause_mode(self) -> str:
        """How an update stops the running requests: "keep" or "abort" ("abort" also before
        the path is chosen)."""
        return self.sync.pause if self.sync else "abort"

    async def sync_path(self) -> SyncPath:
        """This server's weight-sync path (module docstring), chosen once, on the engine loop.
        A server that cannot be reached raises (the caller's request fails) and is asked again
        next time."""
        if self.sync is not None:
            return self.sync
        if self._detecting is None:
            self._detecting = asyncio.Lock()
        async with self._detecting:
            if self.sync is None:
                transfer, labels, why = await self._detect()
                self.sync = choose(
                    weight_transfer=transfer, token_labels=labels, pause_mode=None,
                    where=self.base_url,
                )  # fmt: skip
                log.info("vLLM server %s: %s (%s)", self.base_url, self.sync.describe(), why)
        return self.sync

    async def _detect(self) -> tuple[bool, bool, str]:
        """(weight transfer, token labels, why) from the server's OpenAPI schema and its
        answer to `/init_weight_transfer_engine`."""
        resp = await self.client.get(f"{self.base_url}/openapi.json", timeout=self.timeout_s)
        missing, lacking, labels = schema_facts(resp.json() if resp.status_code == 200 else {})
        if missing:
            return False, False, f"the server lacks {missing[:3]} (VLLM_SERVER_DEV_MODE=1)"
        init = await self._send("/init_weight_transfer_engine", {"init_info": {}})
        if init.status_code >= 400:
            why = (
                f"/init_weight_transfer_engine: HTTP {init.status_code} (start the server with "
                '--weight-transfer-config \'{"backend": "agentrl_file"}\' and agentrl\'s '
                "--worker-extension-cls)"
            )
            return False, False, why
        if lacking:
            return True, False, f"weight transfer initialised; no {lacking[:2]} for pause keep"
        if not labels:
            return True, False, "weight transfer initialised; the token route has no labels"
        return True, True, "weight transfer initialised, the token route labels tokens"

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
                sync = await self.sync_path()
            except Exception as exc:  # an unreachable server: the request's error
                return error_result(exc)
            if sync.labels:
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
            await self._update(await self.sync_path(), path)

        try:
            self._loop.admin(call, self.timeout_s, "vLLM server update_weights")
        finally:
            os.unlink(path)

    async def _update(self, sync: SyncPath, path: str) -> None:
        """Pause, load `path` (`_load`), drop the prefix cache, resume (module docstring)."""
        keep = sync.pause == "keep"

        async def load() -> None:
            await self._load(sync, path)
            params = {"reset_running_requests": "true"} if keep else None
            reset = await self._post("/reset_prefix_cache", params=params)
            if keep and not (reset or {}).get("success"):
                raise EngineError(f"{self.base_url}/reset_prefix_cache failed: {reset}")

        async def abort(_: list[str]) -> None:  # only while draining, i.e. pause mode abort
            await self._post("/abort_requests", {})  # all: the server's ids are not ours

        await self._requests.update(
            pause=lambda: self._pause(sync.pause), abort=abort, load=load, resume=self._resume,
            drain_timeout_s=self.timeout_s / 2, drain=not keep,
        )  # fmt: skip

    async def _load(self, sync: SyncPath, path: str) -> None:
        if sync.transfer == "rpc":
            await self._post(
                "/collective_rpc", {"method": "agentrl_load_weights_file", "args": [path]}
            )
            return
        await self._post("/start_weight_update")
        await self._post("/update_weights", {"update_info": {"path": path}})
        # A 0.26.0 server ignores the body; 0.32 labels the new weights with it.
        label = {"weight_version": str(self._requests.version + 1)} if sync.labels else {}
        await self._post("/finish_weight_update", label)

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
