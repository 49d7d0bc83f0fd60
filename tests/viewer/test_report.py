"""Run-folder report: PNG curves from metrics.jsonl and the `agentrl runs` summary."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from agentrl.cli import main
from agentrl.report import family_of, summarize, write_plots


def make_run(root: Path, steps: int = 30, evals: bool = True) -> Path:
    run = root / "runs" / "calc"
    run.mkdir(parents=True)
    with open(run / "metrics.jsonl", "w") as f:
        for s in range(steps):
            row = {
                "step": s,
                "timestamp": 1_700_000_000 + 12.5 * s,
                "reward/mean": 0.2 + 0.6 * (1 - math.exp(-s / 8)) + 0.02 * math.sin(s),
                "success_rate": min(1.0, 0.1 + s / 40),
                "response_length/mean": 40 + s,
                "kl": 0.001 * s,
                "entropy": 1.2 - 0.01 * s,
                "loss/policy": -0.01 * s,
                "grad_norm": 0.5,
                "lr": 1e-5,
                "note": "strings are ignored",
            }
            f.write(json.dumps(row) + "\n")
        f.write('{"step": 30, "reward/me')  # a run still writing its next line
    if evals:
        rows = [{"step": 0, "reward/mean": 0.21, "success_rate": 0.1}]
        rows.append({"step": steps, "reward/mean": 0.77, "success_rate": 0.7})
        (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_families() -> None:
    assert family_of("reward/mean") == "reward"
    assert family_of("success_rate") == "success"
    assert family_of("response_length/mean") == "length"
    assert family_of("kl") == "kl" and family_of("actor/kl_loss") == "kl"
    assert family_of("tokens_per_s") == "throughput"
    assert family_of("rollout/samples/s") == "throughput"
    # "/s" only as a unit: neither staleness nor a step is a throughput
    assert family_of("async/staleness_max") == "other" and family_of("time/step") == "time"
    assert family_of("lr") == "other"


def test_write_plots(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    paths = write_plots(run)
    names = {p.name for p in paths}
    assert {"reward.png", "success.png", "length.png", "kl.png", "entropy.png"} <= names
    assert "other.png" in names  # lr has no family
    for p in paths:
        assert p.parent == run / "plots"
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] >= 300
    assert write_plots(tmp_path / "empty") == []


def test_summarize(tmp_path: Path) -> None:
    s = summarize(make_run(tmp_path))
    assert s.steps == 30 and s.last_step == 29
    assert s.reward_key == "reward/mean" and s.first_reward == pytest.approx(0.2)
    assert s.best_reward >= s.last_reward - 0.05 and s.best_step is not None
    assert s.success_key == "success_rate" and s.last_success == pytest.approx(0.825)
    assert s.eval_before["reward/mean"] == 0.21 and s.eval_after["reward/mean"] == 0.77
    assert s.wall_s == pytest.approx(12.5 * 29)


def test_bad_line_in_the_middle_names_it(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        summarize(run)


def test_runs_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path)
    assert main(["runs", "show", str(run), "--plots"]) == 0
    out = capsys.readouterr().out
    assert "0.200 → " in out and "eval reward/mean before → after" in out
    assert "0.210 → 0.770" in out and "6m02s" in out and "plot:" in out
    assert main(["runs", "show", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 30
    assert main(["runs", "list", str(tmp_path / "runs")]) == 0
    assert "calc" in capsys.readouterr().out
    assert main(["runs", "plot", str(run), "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "reward.png").exists()
    assert main(["runs", "show", str(tmp_path / "nope")]) == 2


def test_wall_time_sources(tmp_path: Path) -> None:
    from agentrl.report.metrics import wall_time

    assert wall_time([{"time": 1.7e9}, {"time": 1.7e9 + 90}]) == 90  # the trainer's logger
    assert wall_time([{"time/step": 2.0}, {"time/step": 3.0}]) == 5.0
    assert wall_time([{"time/elapsed_s": 4.0}, {"time/elapsed_s": 9.0}]) == 9.0
    assert wall_time([{"step": 1}]) is None


def test_runs_show_staleness_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `trainer.async` run with the `wait` policy: cumulative counters show their last value
    (the policy logs running totals), per-step ones their sum over the run's steps."""
    run = make_run(tmp_path, steps=4, evals=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()[:4]]
    waited, dropped = [0, 2, 2, 5], [0, 0, 1, 1]
    for row, w, d, wait_s in zip(rows, waited, dropped, [0.0, 0.25, 0.0, 1.5], strict=True):
        row |= {"async/stale/waited_groups": w, "async/stale/dropped_groups": d}
        if wait_s:  # the step that did not wait logs no wait_s
            row["async/stale/wait_s"] = wait_s
        row["async/stale/held_prompts"] = 2
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(run)
    assert s.stale == {
        "dropped_groups": 1,
        "held_prompts": 8,
        "wait_s": pytest.approx(1.75),
        "waited_groups": 5,
    }
    assert main(["runs", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "staleness (trainer.async)" in out
    assert re.search(r"waited_groups\s+│?\s*5 \(total\)", out), out
    assert re.search(r"dropped_groups\s+│?\s*1 \(total\)", out), out
    assert re.search(r"wait_s\s+│?\s*1\.750 \(sum over steps\)", out), out
    assert re.search(r"held_prompts\s+│?\s*8 \(sum over steps\)", out), out
    assert main(["runs", "show", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"]["waited_groups"] == 5
    assert summarize(make_run(tmp_path / "sync")).stale == {}  # a synchronous run has none
