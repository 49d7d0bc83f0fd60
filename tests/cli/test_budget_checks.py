"""A recipe's token budget that cuts the env's solutions is said before training (issue 42,
part 2, item 3): `agentrl envs check --config` and `agentrl doctor` tokenise the oracle's
turns against `sampling.max_new_tokens` (and the episode and turn budgets) and warn; a step
line shows the overlong rate when it is not zero."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentrl.cli import main


def recipe(tmp: Path, cache: Path, max_new: int) -> Path:
    path = tmp / f"recipe-{max_new}.yaml"
    path.write_text(
        f"model:\n  path: tiny:qwen2\n  cache_dir: {cache}\ndata:\n  env: math/calc-easy-v0\n"
        f"sampling:\n  max_new_tokens: {max_new}\nrollout:\n  max_total_tokens: 512\n"
        "sft:\n  steps: 0\n"
    )
    return path


def test_envs_check_config_warns_when_a_budget_cuts_the_oracle(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["envs", "check", "--config", str(recipe(tmp_path, agentrl_cache, 8))]) == 0
    out = capsys.readouterr().out
    warn = next(ln for ln in out.splitlines() if ln.startswith("WARN"))
    m = re.search(
        r"max_new_tokens=8 cuts the oracle's solution in (\d+) of 16 episodes "
        r"\(its longest turn is (\d+) tokens\)",
        warn,
    )
    assert m and int(m.group(1)) > 0, out
    longest = int(m.group(2))
    assert f"fix: set sampling.max_new_tokens >= {longest}" in warn
    # One token short still cuts; the oracle's longest turn fits.
    short = recipe(tmp_path, agentrl_cache, longest - 1)
    assert main(["envs", "check", "--config", str(short)]) == 0
    assert "WARN" in capsys.readouterr().out
    enough = recipe(tmp_path, agentrl_cache, longest)
    assert main(["envs", "check", "--config", str(enough)]) == 0
    out = capsys.readouterr().out
    assert "WARN" not in out and f"longest turn {longest}/{longest} tokens" in out


def test_doctor_warns_too(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = recipe(tmp_path, agentrl_cache, 8)
    main(["doctor", "--config", str(path), "--no-sandbox", "--json"])
    findings = json.loads(capsys.readouterr().out)
    warned = [f for f in findings if "cuts the oracle's solution" in f["title"]]
    assert warned and warned[0]["level"] == "WARN" and warned[0]["section"] == "budget"


def test_step_line_shows_the_overlong_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.trainer.logger import MetricsLogger

    log = MetricsLogger(tmp_path, tensorboard=False, wandb=False, config={})
    log.log(1, {"reward/mean": 0.5, "termination/overlong": 0.25})
    log.log(2, {"reward/mean": 0.5, "termination/overlong": 0.0})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("overlong=25%") and "overlong" not in lines[1]
