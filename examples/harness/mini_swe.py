"""mini-swe-agent (its `DefaultAgent`, a litellm model and its shipped configs), as its users run it.

Train it on agentrl's SWE env:

    agentrl train --agent mini_swe:solve --env swe/tiny-repo-v0 trainer.steps=20

(run from this folder, or with it on PYTHONPATH; `pip install mini-swe-agent`). Nothing here
knows about agentrl. The model is litellm's `openai/<name>` with `api_base` set to the URL
the program is given, the usual way to point mini-swe-agent at a local OpenAI-compatible
server. The one thing chosen for training is *where the commands run*: mini-swe-agent
executes each bash action through an `Environment` (local shell, docker, ...), and here
that is `RemoteBashEnvironment`, which sends the command to the `bash` tool at
`task["tools_url"]`. agentrl serves the SWE env's own tools there, so the commands run in
the env's sandboxed workspace and the env's grader scores the files they changed. (A local
shell would edit a copy the grader never sees; see docs/rollout.md.)

`config`: mini-swe-agent's `mini` (bash as a tool call, its default since 2.0) or
`mini_textbased` (the bash command parsed from a fenced block in the text, as in 1.x).
Either way a turn that fails to parse is dropped from the history mini-swe-agent sends
next (it keeps only the error message), so the gateway records such an episode as several
segments of one session.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_path
from minisweagent.environments.local import LocalEnvironment
from minisweagent.exceptions import LimitsExceeded, Submitted
from minisweagent.models import get_model

_EXIT_CODE = re.compile(r"\n?\[exit code (-?\d+)\]$")


class RemoteBashEnvironment(LocalEnvironment):
    """mini-swe-agent's local environment, with each command sent to a remote `bash` tool
    (`POST {tools_url}/bash` with `{"arguments": {"command": ...}}`, answer `{"output": ...}`);
    mini-swe-agent's submit command also calls the remote `submit` tool."""

    def __init__(self, *, tools_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tools_url = tools_url.rstrip("/")

    def _call(self, tool: str, arguments: dict[str, Any], timeout: float) -> str:
        body = json.dumps({"arguments": arguments}).encode()
        req = urllib.request.Request(
            f"{self.tools_url}/{tool}", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return str(json.loads(r.read())["output"])
        except urllib.error.HTTPError as e:
            if e.code == 409:  # the remote episode is over (submitted, or out of turns)
                end = {"exit_status": "EnvironmentEnded", "submission": ""}
                exit_msg = {"role": "exit", "content": "EnvironmentEnded", "extra": end}
                raise LimitsExceeded(exit_msg) from e
            raise

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        wait = (timeout or self.config.timeout) + 60  # the remote side enforces its own limit
        try:
            text = self._call("bash", {"command": action.get("command", "")}, wait)
        except (urllib.error.URLError, TimeoutError) as e:
            return {"output": "", "returncode": -1, "exception_info": f"remote bash failed: {e}"}
        code = _EXIT_CODE.search(text)
        output = {
            "output": text[: code.start()] if code else text,
            "returncode": int(code.group(1)) if code else 0,
            "exception_info": "",
        }
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict) -> None:
        try:
            super()._check_finished(output)
        except Submitted:
            self._call("submit", {}, 600)
            raise


def solve(
    task: dict[str, Any],
    base_url: str,
    config: str = "mini",
    step_limit: int = 30,
    model_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One episode of mini-swe-agent on `task["prompt"]`; returns how it ended."""
    cfg = yaml.safe_load(get_config_path(config).read_text())
    model_cfg = dict(cfg.get("model", {}))
    model_cfg |= {
        "model_name": "openai/policy",
        "model_class": "litellm_textbased" if config.endswith("textbased") else "litellm",
        "cost_tracking": "ignore_errors",  # a local model has no price
        "model_kwargs": model_cfg.get("model_kwargs", {})
        | {"api_base": base_url, "api_key": "unused"}
        | (model_kwargs or {}),
    }
    env = RemoteBashEnvironment(tools_url=task["tools_url"], **cfg.get("environment", {}))
    agent_cfg = cfg["agent"] | {"step_limit": step_limit}
    agent = DefaultAgent(get_model(config=model_cfg), env, **agent_cfg)
    result = agent.run(task["prompt"])
    return {"answer": result.get("submission") or result.get("exit_status", "")}
