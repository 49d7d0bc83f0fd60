"""`agentrl train` with real vLLM, in-process and a server (split placement: the rollout
engine is another process reached over HTTP, weights through a file), and
`trainer.async.max_staleness: 1`: the rollout of the next batch runs while the current one
trains, and each weight sync pauses vLLM's running requests between two steps
(`engines/_versioned.py`). The real CLI in a subprocess, 4 steps on `tiny:qwen2-small`: it
finishes, no trained token is more than one version behind, some are behind (the pipeline
overlapped), and every dumped sampled token carries the version that sampled it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm_checks as checks

pytestmark = [*checks.MARKS, pytest.mark.timeout(900)]

CONFIG = """\
model:
  path: tiny:qwen2-small
  cache_dir: {cache}
engine:
  kind: vllm
{engine}
data:
  env: math/calc-easy-v0
  batch_size: 4
  eval_episodes: 0
rollout:
  n: 4
sampling:
  max_new_tokens: 24
sft:
  steps: 0
trainer:
  steps: 4
  mini_batch_size: 16
  micro_batch_size: 8
  dump_rollouts_every: 1
  tensorboard: false
  save_every: 0
  out_dir: {out}
  async:
    max_staleness: 1
"""


IN_PROCESS = "  extra: {enforce_eager: true, max_model_len: 512}"
SERVER = "  server_url: {url}\n  extra: {{weight_sync_dir: {sync}, served_model_name: {name}}}"


@pytest.mark.parametrize("mode", ["in-process", "server"])
def test_pipelined_training_on_real_vllm(tmp_path: Path, small_path: str, mode: str) -> None:
    from engine_helpers import CACHE

    from agentrl.engines.vllm_server import LocalVLLMServer

    with contextlib.ExitStack() as stack:
        engine = IN_PROCESS
        if mode == "server":
            log = tmp_path / "server.log"
            srv = LocalVLLMServer(
                small_path, port=checks.free_port(), args=checks.SERVER_ARGS, log_path=log
            )
            stack.enter_context(srv)
            engine = SERVER.format(url=srv.url, sync=tmp_path / "sync", name=small_path)
        train_and_check(tmp_path, CONFIG.format(cache=CACHE, out=tmp_path / "run", engine=engine))


def train_and_check(tmp_path: Path, config: str) -> None:
    out = tmp_path / "run"
    cfg = tmp_path / "async-vllm.yaml"
    cfg.write_text(config)
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "train", "--config", str(cfg)],
        capture_output=True, text=True, timeout=840, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    # The one line that says which path vLLM took reaches the user (an INFO line: Python alone
    # printed none), and the engine's shutdown leaves no traceback at exit.
    paths = [line for line in proc.stderr.splitlines() if line.startswith("agentrl: vLLM")]
    assert len(paths) == 1 and "pause mode keep" in paths[0], paths  # vLLM 0.32: native
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    stale = [r.get("async/staleness_max") for r in rows]
    assert all(s is not None and s <= 1 for s in stale), stale
    assert max(stale) == 1, stale  # the next batch was sampled while the previous one trained
    dumps: list[dict[str, Any]] = []
    for f in sorted((out / "rollouts").glob("step_*.jsonl")):
        dumps += [json.loads(line) for line in f.read_text().splitlines()]
    assert dumps
    for t in dumps:
        versions = t["weight_versions"]
        assert len(versions) == len(t["response_ids"])
        sampled = [v for v, m in zip(versions, t["loss_mask"], strict=True) if m]
        assert sampled and all(v >= 0 for v in sampled)
