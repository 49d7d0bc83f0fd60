"""`agentrl serve --out` appends every finished request as it ends: the real CLI server is
killed with SIGKILL mid-session and nothing that finished is lost; the file records the
tokenizer and chat template, so `agentrl view` decodes it to text with no flags."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrl.tools.calculator import calculator
from agentrl.tools.core import build_schema
from agentrl.types import Trajectory, read_jsonl

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi", reason="agentrl serve needs the serve extra")

TOOLS = [build_schema(calculator)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"agentrl serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("agentrl serve did not come up")


def test_kill_9_loses_no_finished_request(served_model: Any, tmp_path: Path) -> None:
    _, chat = served_model
    model_dir = str(chat.tokenizer.name_or_path)
    out, port = tmp_path / "served.jsonl", _free_port()
    cmd = [sys.executable, "-m", "agentrl.cli", "serve", "--model", model_dir]
    cmd += ["--port", str(port), "--out", str(out), "--device", "cpu", "--temperature", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "What is 12 + 30 * 2?"}]
        head = {"X-Session-Id": "k1"}
        first = client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, max_tokens=48, extra_headers=head
        ).choices[0]
        msgs.append(first.message.model_dump(exclude_none=True))
        call_id = first.message.tool_calls[0].id if first.message.tool_calls else None
        if call_id:
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": "72"})
        else:
            msgs.append({"role": "user", "content": "again"})
        client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, max_tokens=16, extra_headers=head
        )
        list(  # a streamed request, in a second session
            client.chat.completions.create(
                model="m",
                messages=msgs[:1],
                max_tokens=8,
                stream=True,
                extra_headers={"X-Session-Id": "k2"},
            )
        )
        token_file = out.with_name(out.name + ".token")  # the CLI's per-run admin token
        assert token_file.stat().st_mode & 0o777 == 0o600
        head = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        reward = f"{url}/v1/trajectories/k1/reward"
        assert httpx.post(reward, json={"reward": 0.5}).status_code == 401  # no token
        httpx.post(reward, json={"reward": 0.5}, headers=head).raise_for_status()
        live = httpx.get(f"{url}/v1/trajectories", headers=head).json()["data"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    raw = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(raw) == 4  # k1 turn 1, k1 turn 2, k2, the reward: one line each as it ended
    saved = list(read_jsonl(out))  # the newest line of each segment
    assert [t.to_dict() for t in saved] == live
    (k1,) = [t for t in saved if t.group_id == "k1"]
    assert len(k1.turns) == 2 and k1.reward == 0.5
    meta = k1.metadata
    assert meta["tokenizer"] == model_dir and meta["chat_template"] == chat.chat_template
    assert meta["tool_format"] == "hermes" and len(meta["chat_template_sha256"]) == 64

    from agentrl.viewer import write_view

    res = write_view(out)  # no --tokenizer: it comes from the recorded metadata
    assert res.tokenizer == model_dir and res.episodes == 2
    (rec,) = [r for r in res.records if r["group"] == "k1"]
    text = "".join(rec["resp"]["text"])
    assert text == chat.decode(k1.response_ids) and "<|im_end|>" in text


def test_clean_shutdown_compacts(served_model: Any, tmp_path: Path) -> None:
    from live_server import live_server
    from simple_engine import SimpleTorchEngine

    from agentrl.serve import create_app

    model, chat = served_model
    out = tmp_path / "s.jsonl"
    out.write_text(Trajectory(prompt_ids=[1, 2]).to_json() + "\n")  # an earlier run's line
    app = create_app(SimpleTorchEngine(model, chat.stop_token_ids), chat, out=out)
    with live_server(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        msgs = [{"role": "user", "content": "hi"}]
        for _ in range(2):
            r = client.chat.completions.create(
                model="m", messages=msgs, max_tokens=4, extra_headers={"X-Session-Id": "c"}
            )
            msgs += [r.choices[0].message.model_dump(exclude_none=True)]
            msgs += [{"role": "user", "content": "more"}]
        assert len(out.read_text().splitlines()) == 3
    lines = out.read_text().splitlines()
    assert len(lines) == 2  # compacted: the earlier line, then one line for the segment
    assert [len(t.turns) for t in read_jsonl(out)] == [0, 2]
    assert os.path.getsize(out) > 0
