"""Agent programs for the harness tests: plain user code on the real `openai` client.

Each is called as `fn(task, base_url)` in its own process by `agentrl.rollout.agent_child`;
none knows it is being trained (no session header, no agentrl import).
"""

from __future__ import annotations

import ast
import json
import operator
import time
from typing import Any

from openai import OpenAI

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def arithmetic(expression: str) -> str:
    """+, -, * over integers, parsed (never eval)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("unsupported expression")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (ValueError, SyntaxError, RecursionError) as e:
        return f"error: {e}"


def calc_agent(task: dict[str, Any], base_url: str) -> str:
    """A tool-calling loop: ask, run the calculator on each call, answer when no call."""
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]
    for _ in range(3):
        reply = client.chat.completions.create(
            model="policy", messages=messages, tools=[CALCULATOR], max_tokens=12
        )
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return msg.content or ""
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments or "{}")
            result = arithmetic(str(args.get("expression", "")))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""


def rewriting_agent(task: dict[str, Any], base_url: str) -> None:
    """Asks twice and rewrites its history in between (drops its first answer, rephrases
    the question): the gateway records two segments of one session. Returns nothing, so
    the session's last assistant text is the answer."""
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    first = [{"role": "user", "content": task["prompt"]}]
    client.chat.completions.create(model="policy", messages=first, max_tokens=6)
    again = [
        {"role": "system", "content": "Answer with one number."},
        {"role": "user", "content": "Once more: " + task["prompt"]},
    ]
    client.chat.completions.create(model="policy", messages=again, max_tokens=6)


def crashing_agent(task: dict[str, Any], base_url: str) -> str:
    OpenAI(base_url=base_url, api_key="unused", max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    raise RuntimeError("the agent's own bug")


def hanging_agent(task: dict[str, Any], base_url: str) -> str:
    time.sleep(3600)
    return "never"


def answer_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Calls the model once, then answers from the task itself: `calc` envs pose
    "What is A + B?" and the agent's own arithmetic is always right (reward 1 from the
    env's grader), so the reward provably comes from the env scoring the returned answer."""
    OpenAI(base_url=base_url, api_key="unused", max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    question = task["prompt"].split("What is", 1)[-1].split("?", 1)[0]
    return {"answer": arithmetic(question.strip())}


def flaky_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Right on even seeds; crashes on odd ones (after using the model)."""
    if task["seed"] % 2:
        return crashing_agent(task, base_url)  # type: ignore[return-value]
    return answer_agent(task, base_url)


def greedy_probe_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Sends one request twice (no temperature of its own: the gateway's default applies)
    and answers right only if both replies are the same tokens, i.e. the gateway sampled
    greedily; sampled replies of a random model differ."""
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": task["prompt"]}]
    ids = []
    for _ in range(2):
        reply = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=8, extra_body={"return_token_ids": True}
        )
        ids.append(reply.choices[0].model_dump()["token_ids"])
    question = task["prompt"].split("What is", 1)[-1].split("?", 1)[0]
    return {"answer": arithmetic(question.strip()) if ids[0] == ids[1] else "none"}


def stuck_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Right on even seeds; hangs on odd ones."""
    if task["seed"] % 2:
        return hanging_agent(task, base_url)  # type: ignore[return-value]
    return answer_agent(task, base_url)


def split_or_crash_agent(task: dict[str, Any], base_url: str) -> Any:
    """Right on even seeds; on odd ones the first run rewrites its history (two segments of
    one episode) and the others crash. The run's index is the session's (`<task>-<k>-<id>`
    in the base URL)."""
    if task["seed"] % 2 == 0:
        return answer_agent(task, base_url)
    session = base_url.split("/s/", 1)[1].split("/", 1)[0]
    if session.rsplit("-", 2)[1] == "0":
        return rewriting_agent(task, base_url)
    return crashing_agent(task, base_url)


def cheating_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Tries to score itself: posts a reward for its own session (root and session URLs),
    tries to read every session, and returns a wrong answer claiming reward 1. Writes what
    each probe got to $HARNESS_PROBE_FILE."""
    import os
    import urllib.error
    import urllib.request

    root, rest = base_url.split("/s/", 1)
    session = rest.split("/", 1)[0]

    def status(url: str, body: dict[str, Any] | None = None) -> int:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    probes = {
        "reward_root": status(f"{root}/v1/trajectories/{session}/reward", {"reward": 1.0}),
        "reward_session_url": status(f"{base_url}/trajectories/{session}/reward", {"reward": 1.0}),
        "read_all": status(f"{root}/v1/trajectories"),
        "token_in_env": [k for k in os.environ if "SERVE_TOKEN" in k],
    }
    OpenAI(base_url=base_url, api_key="unused", max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    with open(os.environ["HARNESS_PROBE_FILE"], "a") as f:
        f.write(json.dumps(probes) + "\n")
    return {"answer": "no number here", "reward": 1.0}


def self_graded_agent(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """A program with its own grader (`rollout.harness.reward: agent`): it reports 0.5."""
    answer = answer_agent(task, base_url)
    return {"answer": answer["answer"], "reward": 0.5}


def quarter_reward(task: dict[str, Any], answer: str) -> float:
    """A reward function (`rollout.harness.reward: function`): 0.25 for a numeric answer."""
    return 0.25 if answer.strip().lstrip("-").isdigit() else 0.0


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), {}


def swe_edit_agent(task: dict[str, Any], base_url: str) -> str:
    """Edits the repository through the env's own tools (`task["tools_url"]`): applies the
    edit $HARNESS_SWE_EDITS names for this task's prompt (if any), submits, then tries one
    more command after the submit. Writes what each call got to $HARNESS_PROBE_FILE."""
    import os

    OpenAI(base_url=base_url, api_key="unused", max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    with open(os.environ["HARNESS_SWE_EDITS"]) as f:
        edit = json.load(f).get(task["prompt"])
    url = task["tools_url"]
    probes: dict[str, Any] = {}
    if edit is not None:
        probes["str_replace"] = _post(f"{url}/str_replace", {"arguments": edit})
    probes["submit"] = _post(f"{url}/submit", {"arguments": {}})
    probes["after_submit"] = _post(f"{url}/bash", {"arguments": {"command": "ls"}})[0]
    with open(os.environ["HARNESS_PROBE_FILE"], "a") as f:
        f.write(json.dumps(probes) + "\n")
    return "submitted"


def imported_modules(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Which heavy modules the agent's process had loaded when it ran (none expected: the
    agent's child imports the standard library and the agent's own module only)."""
    import sys

    heavy = ("torch", "transformers", "agentrl.rollout", "agentrl.engines")
    return {"answer": ",".join(m for m in heavy if m in sys.modules)}


def pid_hanging_agent(task: dict[str, Any], base_url: str) -> str:
    """Writes its pid to $AGENT_PID_DIR, then hangs: what a stopped trainer must not leave."""
    import os
    from pathlib import Path

    Path(os.environ["AGENT_PID_DIR"], str(os.getpid())).touch()
    time.sleep(3600)
    return "never"
