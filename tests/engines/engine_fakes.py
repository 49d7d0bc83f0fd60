"""Fakes imitating the documented shapes of vLLM / SGLang objects and HTTP responses.

They are stand-ins for tests only, for what cannot run on these machines: SGLang (CUDA-only)
and vLLM's GPU-only paths (sleep mode); real vLLM runs in tests/engines/real_vllm/. Each fake
returns a scripted continuation (`SCRIPT`) and records what it was asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SCRIPT_IDS = [11, 12, 13]
SCRIPT_LOGPROBS = [-0.5, -1.25, -0.125]


# ---------------------------------------------------------------- vLLM in-process shapes


@dataclass
class FakeVLLMLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeVLLMCompletion:
    token_ids: list[int]
    logprobs: list[dict[int, FakeVLLMLogprob]] | None
    finish_reason: str | None = "stop"
    text: str = ""


@dataclass
class FakeVLLMOutput:
    request_id: str
    outputs: list[FakeVLLMCompletion]
    finished: bool = True


class FakeVLLMSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@dataclass
class FakeAsyncLLM:
    """Streams two partial outputs then a final one, as `AsyncLLM.generate` does."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail: bool = False
    loaded: dict[str, Any] = field(default_factory=dict)

    async def generate(
        self, prompt: dict[str, Any], sampling: Any, request_id: str
    ) -> AsyncIterator[FakeVLLMOutput]:
        self.calls.append(("generate", (prompt, sampling.kwargs)))
        if self.fail:
            raise RuntimeError("engine dead")
        for n in (1, 2, 3):
            # A top-1 alternative sits beside the sampled id, as with logprobs>=1.
            steps = [
                {tok: FakeVLLMLogprob(lp, 2), 999: FakeVLLMLogprob(-0.01, 1)}
                for tok, lp in zip(SCRIPT_IDS[:n], SCRIPT_LOGPROBS[:n], strict=True)
            ]
            yield FakeVLLMOutput(
                request_id,
                [FakeVLLMCompletion(SCRIPT_IDS[:n], steps, "stop" if n == 3 else None)],
                n == 3,
            )

    async def abort(self, request_id: str) -> None:
        self.calls.append(("abort", request_id))

    async def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Records the call; a weights file is read now (as the worker would), since the
        engine deletes it once the call returns: its tensors land in `loaded`."""
        self.calls.append(("collective_rpc", (method, args)))
        if method == "agentrl_load_weights_file":
            from safetensors.torch import load_file

            self.loaded = load_file(args[0])
        return [None]

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        self.calls.append(("reset_prefix_cache", None))
        return True  # as vLLM answers once nothing holds a cached block

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        self.calls.append(("pause_generation", mode))

    async def resume_generation(self) -> None:
        self.calls.append(("resume_generation", None))

    async def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))

    async def wake_up(self, tags: Any = None) -> None:
        self.calls.append(("wake_up", tags))

    def shutdown(self) -> None:
        self.calls.append(("shutdown", None))


# ---------------------------------------------------------------- SGLang in-process shape


def fake_sglang_result(finish: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "text": "abc",
        "output_ids": list(SCRIPT_IDS),
        "meta_info": {
            "id": "fake",
            "prompt_tokens": 3,
            "completion_tokens": 3,
            "finish_reason": finish or {"type": "stop", "matched": SCRIPT_IDS[-1]},
            "output_token_logprobs": [
                [lp, tok, None] for tok, lp in zip(SCRIPT_IDS, SCRIPT_LOGPROBS, strict=True)
            ],
        },
    }


@dataclass
class FakeSGLangEngine:
    calls: list[tuple[str, Any]] = field(default_factory=list)

    async def async_generate(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("async_generate", kwargs))
        return fake_sglang_result()

    def update_weights_from_tensor(self, named_tensors: list[Any], **kw: Any) -> None:
        self.calls.append(("update_weights_from_tensor", [n for n, _ in named_tensors]))

    def release_memory_occupation(self) -> None:
        self.calls.append(("release_memory_occupation", None))

    def resume_memory_occupation(self) -> None:
        self.calls.append(("resume_memory_occupation", None))

    def shutdown(self) -> None:
        self.calls.append(("shutdown", None))


# ---------------------------------------------------------------- HTTP servers (loopback)


def fake_completions_body(with_token_ids: bool) -> dict[str, Any]:
    """vLLM `/v1/completions` response with `return_tokens_as_token_ids`."""
    choice: dict[str, Any] = {
        "index": 0,
        "text": "abc",
        "logprobs": {
            "tokens": [f"token_id:{t}" for t in SCRIPT_IDS],
            "token_logprobs": list(SCRIPT_LOGPROBS),
            "top_logprobs": [
                {f"token_id:{t}": lp} for t, lp in zip(SCRIPT_IDS, SCRIPT_LOGPROBS, strict=True)
            ],
            "text_offset": [0, 1, 2],
        },
        "finish_reason": "length",
        "stop_reason": None,
    }
    if with_token_ids:
        choice["token_ids"] = list(SCRIPT_IDS)
    return {"id": "cmpl-fake", "object": "text_completion", "choices": [choice], "usage": {}}


class FakeHTTPServer:
    """A loopback-only HTTP server answering POSTs (and GETs) from a route table; records
    requests."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                server.requests.append((self.path, json.loads(raw) if raw else None))
                route = server.routes.get(path)
                status, body = (404, {"error": "no route"}) if route is None else route
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST  # noqa: N815 (http.server API)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
