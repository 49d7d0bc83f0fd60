"""Claude Code (`claude -p`) and Codex CLI (`codex exec`), unchanged, each run one tool-using
episode through the recording gateway, and `agentrl train --agent-command` trains on them.

Real parts throughout: the pinned npm CLIs (`scripts/harness-npm.txt`, on PATH in CI's harness
stage; skipped where absent), the real `agentrl serve` app on the hf engine under uvicorn on
loopback, and a tiny Qwen2 fine-tuned for a few seconds so that it calls the CLI's own tool
and then ends its turn (`cli_model`). The CLIs talk only to the gateway: their base URL is
the session's, every proxy variable points at a closed port with loopback exempt, and
telemetry, update checks and login flows are off (`claude_env`, `codex_config`). What the
test checks is what training needs: the CLI ran the tool the model asked for and sent its
result back; the session is one segment whose every request repeated the recorded
conversation (appends `messages`), and the recorded log-probs are the model's own on the
recorded ids (the trainer's recomputation agrees).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install 'agentrl[serve]'")
hf = pytest.importorskip("agentrl.engines.hf")

import torch  # noqa: E402
from cli_model import model_path  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from agentrl.chat import ChatFormat  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.config.schema import SamplingConfig  # noqa: E402
from agentrl.serve import create_app  # noqa: E402
from agentrl.types import Trajectory  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "serve"))
from live_server import live_server, segments  # noqa: E402

pytestmark = pytest.mark.timeout(900)
CLAUDE = shutil.which("claude")
CODEX = shutil.which("codex")
needs_claude = pytest.mark.skipif(CLAUDE is None, reason="claude not on PATH (ci-harness.sh)")
needs_codex = pytest.mark.skipif(CODEX is None, reason="codex not on PATH (ci-harness.sh)")
SYSTEM = "You are a test agent."
# The gateway forces each episode's first turn to call the CLI's own shell/file tool (Codex's
# other tools have numeric fields a tiny model may not close); the rest is the model's.
FORCE = "exec_command"  # Claude Code offers only Read here: "required" picks it
TEMPERATURE = 0.1  # the tiny model's turns end surely (0.3 strayed into optional arguments
# until max_tokens in about 1 run in 3 of Codex's); log-probs are recorded at it
# A closed port: any request a CLI made past the gateway (telemetry, updates) would fail here.
DEAD_PROXY = "http://127.0.0.1:9"
# `agentrl train` runs a command per episode with the task in $AGENTRL_TASK and the session's
# base URLs in the environment: the prompt goes in as the CLI's argument, and Codex, which
# reads its provider's URL from config only, gets the session's with `-c`.
CODEX_TOOLS = {"exec_command", "write_stdin", "request_user_input", "view_image"}
CODEX_URL = '"model_providers.agentrl.base_url=\\"$OPENAI_BASE_URL\\""'
TASK_PROMPT = (
    'python3 -c \'import json, os; print(json.loads(os.environ["AGENTRL_TASK"])["prompt"])\''
)


def offline_env(home: Path) -> dict[str, str]:
    """A private HOME and every proxy variable at a closed port (loopback exempt)."""
    home.mkdir(parents=True, exist_ok=True)
    proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    return {
        "HOME": str(home),
        **dict.fromkeys(proxies, DEAD_PROXY),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def claude_env(home: Path) -> dict[str, str]:
    """Claude Code's switches for a gateway: no telemetry, error reports, update checks or
    other nonessential traffic; its config under the private HOME."""
    return {
        **offline_env(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def claude_argv(prompt: str) -> list[str]:
    """Headless Claude Code with only its `Read` tool and a one-line system prompt (`--bare`
    skips hooks, plugins, CLAUDE.md discovery and prefetches; API-key auth only)."""
    return [
        "claude",
        "-p",
        prompt,
        "--bare",
        "--tools",
        "Read",
        "--allowedTools",
        "Read",
        "--system-prompt",
        SYSTEM,
        "--model",
        "agentrl",
        "--no-session-persistence",
    ]


def codex_config(home: Path, base_url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    """CODEX_HOME with a `config.toml` whose provider is the gateway (Responses over HTTP, no
    websocket), with update checks and analytics off and the tool list trimmed; the base URL
    is overridden per run with `-c`. Returns the environment."""
    env = offline_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (home / "instructions.md").write_text(SYSTEM + "\n")
    (codex_home / "config.toml").write_text(
        f"""model = "agentrl"
model_provider = "agentrl"
check_for_update_on_startup = false
model_instructions_file = "{home / "instructions.md"}"
web_search = "disabled"
include_permissions_instructions = false
include_environment_context = false

[model_providers.agentrl]
name = "agentrl"
base_url = "{base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
supports_websockets = false

[analytics]
enabled = false

[agents]
enabled = false

[features]
goals = false
apps = false
plugins = false
hooks = false
shell_snapshot = false
skill_search = false

[skills]
include_instructions = false
"""
    )
    return {**env, "CODEX_HOME": str(codex_home)}


def codex_argv(prompt: str, base_url: str) -> list[str]:
    return [
        "codex",
        "exec",
        "--skip-git-repo-check",
        "--ephemeral",
        "-c",
        f"model_providers.agentrl.base_url={json.dumps(base_url)}",
        prompt,
    ]


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Any, ChatFormat]]:
    path = model_path()
    chat = ChatFormat(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = hf.HFEngine(model, chat.tokenizer, max_batch_size=4)
    sampling = SamplingConfig(temperature=TEMPERATURE)
    app = create_app(
        engine, chat, model_name="agentrl", sampling=sampling, force_first_tool_call=FORCE
    )
    with live_server(app) as url:
        yield url, model, chat


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "OPENAI"))}
    return subprocess.run(
        argv, env={**keep, **env}, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def assert_recorded_tool_episode(traj: Trajectory, model: Any, tools: set[str]) -> None:
    """The model's (forced) call of one of the CLI's tools, the CLI's result of running it and
    a last turn the model ended itself, recorded as one segment whose second request repeated
    the recorded conversation; the recorded log-probs are the model's on the recorded ids."""
    said = [(m.role, m.content[:200], [c.name for c in m.tool_calls]) for m in traj.messages]
    assert traj.metadata["appends"] == ["messages"], said
    (note,) = traj.metadata["constrained_turns"].values()
    assert list(traj.metadata["constrained_turns"]) == ["0"]
    assert note.endswith("(forced by the server: force_first_tool_call)"), note
    calls = [c for m in traj.messages if m.role == "assistant" for c in m.tool_calls]
    assert len(calls) == 1 and calls[0].name in tools, calls
    results = [m for m in traj.messages if m.role == "tool"]
    assert len(results) == 1 and results[0].content and results[0].tool_call_id == calls[0].id
    assert traj.messages[-1].role == "assistant" and traj.turns[-1].finish_reason == "stop"
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / TEMPERATURE
    logp = torch.log_softmax(logits, -1)
    n = len(traj.prompt_ids)
    sampled = [i for i, m in enumerate(traj.loss_mask) if m]
    mine = [logp[n + i - 1, traj.response_ids[i]].item() for i in sampled]
    recorded = [traj.logprobs[i] for i in sampled]
    assert max(abs(a - b) for a, b in zip(mine, recorded, strict=True)) < 1e-3


@needs_claude
def test_claude_code_tool_episode(gateway: Any, tmp_path: Path) -> None:
    """`claude -p` reads /etc/hostname with its `Read` tool as the model asked, over the
    streamed Messages API at the session's `ANTHROPIC_BASE_URL`."""
    url, model, _ = gateway
    env = {
        **claude_env(tmp_path / "home"),
        "ANTHROPIC_BASE_URL": f"{url}/s/claude-1",
        "ANTHROPIC_API_KEY": "unused",
    }
    work = tmp_path / "work"
    work.mkdir()
    done = run(claude_argv("What is the host's name?"), env, work)
    assert done.returncode == 0, done.stdout + done.stderr
    (traj,) = segments(url, "claude-1")
    assert_recorded_tool_episode(traj, model, {"Read"})


@needs_codex
def test_codex_tool_episode(gateway: Any, tmp_path: Path) -> None:
    """`codex exec` runs `pwd` with its `exec_command` tool as the model asked, over the
    streamed Responses API (HTTP, not websocket) at the session's base URL."""
    url, model, _ = gateway
    env = {**codex_config(tmp_path / "home"), "OPENAI_API_KEY": "unused"}
    work = tmp_path / "work"
    work.mkdir()
    done = run(codex_argv("Where am I?", f"{url}/s/codex-1/v1"), env, work)
    assert done.returncode == 0, done.stdout + done.stderr
    (traj,) = segments(url, "codex-1")
    assert_recorded_tool_episode(traj, model, CODEX_TOOLS)


def train(cache: Path, out: Path, command: str) -> list[dict[str, Any]]:
    overrides = {
        "model.path": str(model_path()),
        "model.cache_dir": str(cache),
        "data.batch_size": 1,
        "rollout.n": 2,
        "rollout.concurrency": 2,
        "trainer.tensorboard": "false",
        "trainer.steps": 1,
        "trainer.mini_batch_size": 2,
        "trainer.micro_batch_size": 1,
        "trainer.out_dir": str(out),
        "trainer.dump_rollouts_every": 1,
        "sft.steps": 0,
        "data.eval_episodes": 0,
        "rollout.harness.timeout_s": 400,
        "rollout.harness.force_first_tool_call": FORCE,
        "sampling.temperature": TEMPERATURE,
    }
    args = ["train", "--agent-command", command, "--env", "math/calc-easy-v0"]
    assert main([*args, *(f"{k}={v}" for k, v in overrides.items())]) == 0
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def assert_trained_tool_episodes(out: Path, row: dict[str, Any], tools: set[str]) -> None:
    """Both runs finished (none an infra failure) and were trained token-exact (the trainer's
    log-probs reproduce the recorded ones); a run whose forced call the model completed got
    the CLI's result of it (one that ran past max_tokens is a plain text turn: still an
    episode, so at least one of the two must show the tool used)."""
    assert row["harness/infra_failed"] == 0 and row["harness/episodes"] == 2, row
    dumped = (out / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    used = 0
    for t in map(json.loads, dumped):
        calls = [c["name"] for m in t["messages"] for c in m.get("tool_calls") or []]
        results = [m for m in t["messages"] if m["role"] == "tool"]
        assert len(calls) == len(results) <= 1 and set(calls) <= tools, t["messages"]
        used += len(calls)
        sampled = [i for i, m in enumerate(t["loss_mask"]) if m]
        diffs = [abs(t["logprobs"][i] - t["metadata"]["trainer_logprobs"][i]) for i in sampled]
        assert max(diffs) < 1e-3
    assert used >= 1


@needs_claude
def test_train_claude_code(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agentrl train --agent-command "claude -p ..."`: the harness's ANTHROPIC_BASE_URL is
    the session's; the task's prompt is the argument; its last line the answer."""
    for k, v in claude_env(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    script = shlex.join(claude_argv("PROMPT")).replace("PROMPT", f'"$({TASK_PROMPT})"')
    out = tmp_path / "run"
    (row,) = train(agentrl_cache, out, shlex.join(["bash", "-c", script]))
    assert_trained_tool_episodes(out, row, {"Read"})


@needs_codex
def test_train_codex(agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agentrl train --agent-command "bash -c 'codex exec -c ...base_url=$OPENAI_BASE_URL'"`:
    Codex reads its provider's base URL from config, so the command passes the session's."""
    for k, v in codex_config(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    script = (
        shlex.join(codex_argv("PROMPT", "URL"))
        .replace("PROMPT", f'"$({TASK_PROMPT})"')
        .replace(shlex.quote('model_providers.agentrl.base_url="URL"'), CODEX_URL)
    )
    out = tmp_path / "run"
    (row,) = train(agentrl_cache, out, shlex.join(["bash", "-c", script]))
    assert_trained_tool_episodes(out, row, CODEX_TOOLS)
