"""`agentrl doctor`: the default config is healthy; each classic misconfiguration is a FAIL
that names its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.config import TrainConfig, load_config
from agentrl.doctor import Finding, exit_code, run_doctor
from agentrl.envs import load_env_module
from agentrl.models.tiny import build_tiny

BROKEN_ENV = Path(__file__).with_name("broken_env.py")
PLAIN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def fails(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "FAIL"]


def titled(findings: list[Finding], text: str) -> Finding:
    hits = [f for f in fails(findings) if text in f.title]
    assert hits, f"no FAIL mentioning {text!r}; got {[f.title for f in fails(findings)]}"
    assert all(h.fix for h in hits), "every FAIL must say how to fix it"
    return hits[0]


@pytest.fixture(scope="module")
def tiny_path() -> str:
    return str(build_tiny("qwen2"))


@pytest.fixture(scope="module")
def plain_tokenizer(tiny_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny tokenizer with a template that silently ignores `tools`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    tok.chat_template = PLAIN_TEMPLATE
    out = tmp_path_factory.mktemp("plain-tok")
    tok.save_pretrained(out)
    return str(out)


def cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, list(overrides))


def test_default_config_has_no_fail() -> None:
    findings = run_doctor(cfg())
    assert not fails(findings), [f"{f.title}: {f.detail}" for f in fails(findings)]
    sections = {f.section for f in findings}
    assert {
        "stack",
        "sandbox",
        "model",
        "template",
        "env",
        "tools",
        "budget",
        "dry run",
    } <= sections
    assert any(f.section == "dry run" and f.level == "OK" for f in findings)
    assert exit_code(findings) == 0


def test_tool_name_typo_is_caught_twice() -> None:
    load_env_module(BROKEN_ENV)
    findings = run_doctor(cfg("data.env=doctortest/calc-typo-v0"), sandbox=False)
    f = titled(findings, "advertised but not implemented")
    assert "calculater" in f.title and "did you mean 'calculator'" in f.title
    dry = titled(findings, "tools failed under the oracle")
    assert "unknown tool" in dry.detail
    assert exit_code(findings) == 1


def test_template_without_tools_gets_them_injected(plain_tokenizer: str) -> None:
    """A template that ignores `tools` (SmolLM2's ChatML) is not a dead end: the rollout
    injects the schemas hermes style, the doctor checks the injected prompt and calls, and
    the linter says (WARN) what was done."""
    findings = run_doctor(cfg(f"model.tokenizer={plain_tokenizer}"), sandbox=False)
    assert not fails(findings), [f"{f.title}: {f.detail}" for f in fails(findings)]
    assert any(f.title == "every tool appears in the rendered prompt" for f in findings)
    assert any("parser 'hermes' reads every tool call" in f.title for f in findings)
    lint = [x for x in findings if x.section == "template" and x.level == "WARN"]
    assert any("injects" in x.detail for x in lint), [x.detail for x in lint]


def test_parser_format_mismatch() -> None:
    findings = run_doctor(cfg("rollout.tool_format=llama3"), sandbox=False, dry_run_episodes=0)
    f = titled(findings, "tool calls would never fire")
    assert "'llama3'" in f.title and "hermes" in f.fix


def test_budget_over_model_context() -> None:
    findings = run_doctor(cfg("rollout.max_total_tokens=8192"), sandbox=False, dry_run_episodes=0)
    f = titled(findings, "exceeds the model context (4096)")
    assert "<= 4096" in f.fix


def test_prompt_longer_than_budget() -> None:
    findings = run_doctor(
        cfg("rollout.max_total_tokens=64", "sampling.max_new_tokens=16"),
        sandbox=False,
        dry_run_episodes=0,
    )
    f = titled(findings, "does not fit max_total_tokens=64")
    assert "raise rollout.max_total_tokens" in f.fix


def test_trainer_levers_are_checked_before_start() -> None:
    ok = run_doctor(cfg("trainer.packing=true"), sandbox=False, dry_run_episodes=0)
    assert any(f.level == "OK" and "packable" in f.title for f in ok)
    gemma = run_doctor(
        cfg("model.path=tiny:gemma2", "trainer.packing=true"), sandbox=False, dry_run_episodes=0
    )
    assert "packing=false" in titled(gemma, "trainer.packing").fix
    sp = run_doctor(cfg("trainer.ulysses_sp=3"), sandbox=False, dry_run_episodes=0)
    f = titled(sp, "trainer.ulysses_sp=3")
    assert "packing" in f.detail and "fsdp2" in f.detail and "not divisible by 3" in f.detail


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  env: doctortest/calc-typo-v0\nrollout:\n  max_total_tokens: 9000\n")
    argv = ["doctor", "--config", str(bad), "--env-module", str(BROKEN_ENV), "--no-sandbox"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "fix:" in out and "calculater" in out
    assert main(["doctor", "--no-sandbox", "--episodes", "1", "-q"]) == 0
    assert "0 fail" in capsys.readouterr().out
    assert main(["doctor", "--config", str(tmp_path / "missing.yaml")]) == 2


def test_vllm_server_without_rl_endpoints_is_a_fail() -> None:
    """Stand-ins for vLLM servers (stdlib HTTP servers on loopback; a real server with the
    endpoints passes in tests/engines/real_vllm/test_vllm_real_server.py): without
    `VLLM_SERVER_DEV_MODE=1` (`/health` answers, the RL routes are 404) agentrl cannot sync
    weights: FAIL; a dev-mode server of a vLLM without `/pause` (POST-only routes answer
    GET with 405) serves the synchronous loop: WARN, and FAIL for pipelined steps."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentrl.doctor.stack import check_engine_server

    def serve(routes: set[str]) -> ThreadingHTTPServer:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                code = 200 if self.path == "/health" else 405 if self.path in routes else 404
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    no_dev, old = serve(set()), serve({"/collective_rpc"})
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in (no_dev, old)]
    try:
        found = check_engine_server(urls[0], "vllm")
        old_sync = check_engine_server(urls[1], "vllm")
        old_async = check_engine_server(urls[1], "vllm", pipelined=True)
    finally:
        no_dev.shutdown()
        old.shutdown()
    assert found[0].level == "OK"
    fail = titled(found, "no weight-sync endpoint")
    assert "VLLM_SERVER_DEV_MODE=1" in fail.fix and "/collective_rpc → 404" in fail.detail
    assert [f.level for f in old_sync] == ["OK", "WARN"] and "no /pause" in old_sync[1].title
    assert titled(old_async, "no /pause")
    assert titled(check_engine_server(urls[0], "vllm"), "is not reachable")  # now stopped
