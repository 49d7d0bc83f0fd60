"""A `python` code-interpreter tool: one persistent sandboxed interpreter per episode.

Wraps `agentrl.sandboxes.interpreter.PythonSession`, so isolation and limits are the local
sandbox backend's. Variables persist across calls within an episode (like a notebook);
`reset()` between episodes starts a fresh interpreter, so episodes never see each other's
state. The model sees stdout, then stderr (tracebacks), then a status line when a limit hit.
A sandbox that fails itself (cannot start, `sandbox_error`) is no result of the code: it raises
`InfraError("sandbox_error")`, which ends the episode as an infrastructure failure.
"""

from __future__ import annotations

import threading

from agentrl.sandboxes.interpreter import PythonSession
from agentrl.types import InfraError

from .core import ToolSet, tool

_TOOL_TIMEOUT_S = 60.0


class PythonTools(ToolSet):
    """`python(code)` in a sandboxed interpreter whose state lasts one episode."""

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 512) -> None:
        if timeout_s >= _TOOL_TIMEOUT_S:
            raise ValueError(f"timeout_s must be below {_TOOL_TIMEOUT_S}s")
        super().__init__()
        # The session enforces `timeout_s` itself (and restarts a stuck sandbox); the tool's
        # outer timeout is only a backstop.
        self.session = PythonSession(timeout_s=timeout_s, memory_mb=memory_mb)
        self._lock = threading.Lock()  # PythonSession runs one cell at a time

    @tool(timeout_s=_TOOL_TIMEOUT_S, max_output_chars=4000)
    def python(self, code: str) -> str:
        """Run Python code in a persistent sandbox; a trailing expression's value is printed.

        Args:
            code: Python source. Variables and imports persist between calls.
        """
        with self._lock:
            try:
                r = self.session.execute(code)
            except OSError as e:  # the sandbox could not start: the host's failure
                raise InfraError("sandbox_error", f"python sandbox: {e}") from e
        if r.status == "sandbox_error":
            raise InfraError("sandbox_error", f"python sandbox: {r.stderr.strip()[-500:]}")
        parts = [r.stdout, r.stderr] if r.stderr else [r.stdout]
        if r.status not in ("ok", "error"):
            parts.append(f"[{r.status}]")
        text = "\n".join(p.rstrip("\n") for p in parts if p)
        return text or "(no output)"

    def reset(self) -> None:
        with self._lock:
            self.session.reset()

    def close(self) -> None:
        self.session.close()
