"""Run folders never lose work: a previous run is refused (explicit path) or left alone
(the `runs/{env}` template takes a fresh numbered folder); `--overwrite` clears only run
files; a short run still ends with a checkpoint; the last step's eval runs once; TensorBoard
tags and the eval overlay line up; `run.json` records the sessions `runs show` adds up."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from trainer_synth import train_overrides

from agentrl.cli import main
from agentrl.trainer import run_dir


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x]


def test_resolve_template_takes_a_fresh_folder(tmp_path):
    template = str(tmp_path / "runs" / "{env}")
    first = run_dir.resolve(template, "math/calc-easy-v0")
    assert first == tmp_path / "runs" / "math-calc-easy-v0"
    first.mkdir(parents=True)
    (first / "notes.txt").write_text("mine")  # not a run file: the folder is still free
    assert run_dir.resolve(template, "math/calc-easy-v0") == first
    (first / "metrics.jsonl").write_text("{}\n")
    second = run_dir.resolve(template, "math/calc-easy-v0")
    assert second.name == "math-calc-easy-v0-2"
    second.mkdir()
    (second / "eval.jsonl").write_text("{}\n")
    assert run_dir.resolve(template, "math/calc-easy-v0").name == "math-calc-easy-v0-3"
    # --resume continues the newest one (which must have a checkpoint)
    with pytest.raises(run_dir.RunDirError, match="has no checkpoint to continue"):
        run_dir.resolve(template, "math/calc-easy-v0", resume=True)
    (second / "checkpoints").mkdir()
    (second / "checkpoints" / "latest").write_text("step_000002")
    assert run_dir.resolve(template, "math/calc-easy-v0", resume=True) == second


def test_explicit_folder_refused_then_overwritten(tmp_path):
    out = tmp_path / "run"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "reward.png").write_bytes(b"png")
    (out / "metrics.jsonl").write_text("{}\n")
    (out / "keep.txt").write_text("mine")
    with pytest.raises(run_dir.RunDirError, match=r"--resume to continue it, --overwrite"):
        run_dir.resolve(str(out), "x/y-v0")
    assert run_dir.resolve(str(out), "x/y-v0", overwrite=True) == out
    run_dir.claim(out, resume=False, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_cli_refuses_previous_run_before_loading(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    assert main(["train", f"trainer.out_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "holds a previous run (metrics.jsonl)" in err and "--overwrite" in err
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'


SHORT = {
    "trainer__steps": 3,
    "trainer__eval_every": 3,
    "trainer__save_every": 0,
    "trainer__tensorboard": "true",
    "sft__steps": 4,
    "sft__demos": 8,
}


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, agentrl_cache) -> Path:
    """3 steps, SFT 4 steps, eval every 3 steps, no save_every: the CLI end to end."""
    out = tmp_path_factory.mktemp("short") / "run"
    assert main(["train", *train_overrides(agentrl_cache, out, **SHORT)]) == 0
    return out


def test_short_run_ends_with_a_checkpoint(short_run):
    assert (short_run / "checkpoints" / "latest").read_text() == "step_000003"


def test_last_step_eval_runs_once_and_overlays(short_run):
    evals = _rows(short_run / "eval.jsonl")
    assert [r["step"] for r in evals] == [0, 3]
    metrics = _rows(short_run / "metrics.jsonl")
    shared = {"reward/mean", "success_rate"}
    assert shared <= set(evals[0]) and shared <= set(metrics[0])
    assert all(r["time/eval"] > 0 for r in evals)


def test_untouched_model_is_evaluated_before_sft(short_run, capsys):
    """With an SFT bootstrap, step 0's eval is after SFT; the model as loaded gets its own eval
    (issue #42: the recipe's "before" number is not the untouched model's)."""
    (untouched,) = _rows(short_run / "untouched.jsonl")
    assert untouched["step"] == 0 and untouched["episodes"] > 0 and untouched["time/eval"] > 0
    assert main(["runs", "show", str(short_run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["eval_untouched"]["success_rate"] == untouched["success_rate"]
    assert main(["runs", "show", str(short_run)]) == 0
    assert "untouched (before SFT)" in capsys.readouterr().out


def test_held_out_line_leads_with_the_untouched_model(tmp_path):
    from agentrl.trainer.logger import held_out_summary

    rows = [{"step": 0, "success_rate": 0.125}, {"step": 3, "success_rate": 0.5}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    after = {"success_rate": 0.5, "episodes": 8}
    plain = held_out_summary(tmp_path / "eval.jsonl", after)
    assert plain == "held-out success: 12.5% before RL -> 50.0% after (+37.5 points, 8 episodes)"
    (tmp_path / "untouched.jsonl").write_text(json.dumps({"step": 0, "success_rate": 0.0}) + "\n")
    line = held_out_summary(tmp_path / "eval.jsonl", after)
    assert line == (
        "held-out success: 0.0% untouched -> 12.5% after SFT -> 50.0% after RL "
        "(+37.5 points from RL, 8 episodes)"
    )


def test_sft_rows_and_tensorboard_tags(short_run):
    sft = _rows(short_run / "sft.jsonl")
    assert [r["step"] for r in sft if "loss" in r] == [1, 2, 3, 4]
    summary = sft[-1]
    assert summary["loss_first"] == sft[0]["loss"] and summary["time/sft"] > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(short_run / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"sft/loss", "sft/loss_first", "sft/loss_last", "eval/success_rate"} <= tags
    spans = {f"span/trainer/{p}" for p in ("idle", "old_logprobs", "update", "weight_sync")}
    spans |= {f"span/rollout/{p}" for p in ("generate", "env", "tools", "reward", "idle")}
    assert spans <= tags, spans - tags  # both sides' spans per step
    assert not any(t.startswith("sft/sft/") for t in tags)


def test_run_json_and_runs_show_phases(short_run, capsys):
    info = json.loads((short_run / "run.json").read_text())
    (session,) = info["sessions"]
    assert session["end"] > session["start"] and session["setup_s"] > 0
    assert main(["runs", "show", str(short_run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    phases = shown["phases"]
    assert set(phases) >= {"setup", "sft", "eval", "rl steps"}
    assert abs(sum(phases.values()) - shown["wall_s"]) < 1e-6
    assert shown["wall_s"] >= session["end"] - session["start"] - 1e-6
    assert shown["sft_loss_first"] > shown["sft_loss_last"] > 0
    spans = shown["spans"]  # mean seconds per step, trainer and rollout sides
    assert {"trainer/update", "trainer/weight_sync", "rollout/generate", "rollout/idle"} <= set(
        spans
    )
    assert all(v >= 0 for v in spans.values()) and spans["trainer/update"] > 0
    assert main(["runs", "show", str(short_run)]) == 0
    assert "spans (mean s/step)" in capsys.readouterr().out


def test_second_run_refused_then_resume_is_a_noop(short_run, agentrl_cache, capsys):
    args = train_overrides(agentrl_cache, short_run, trainer__steps=3)
    assert main(["train", *args]) == 2
    assert "holds a previous run" in capsys.readouterr().err
    assert main(["train", "--resume", *args]) == 0  # already at step 3: nothing to redo
    assert [r["step"] for r in _rows(short_run / "metrics.jsonl")] == [1, 2, 3]


def test_resume_applies_a_new_lr(short_run, agentrl_cache, tmp_path, capsys):
    """`--resume optim.lr=X`: step 4 trains with X (not the checkpoint's 2e-4), config.yaml
    records X, and the warning does not claim the checkpoint overrides it."""
    import shutil

    import yaml

    out = tmp_path / "run"
    shutil.copytree(short_run, out)
    args = train_overrides(agentrl_cache, out, **(SHORT | {"trainer__steps": 4}))
    capsys.readouterr()
    assert main(["train", "--resume", *args, "optim.lr=5e-5"]) == 0
    printed = capsys.readouterr()
    # every key that differs from the run's config.yaml is listed; the lr is not overridden
    assert re.search(r"^  optim\.lr: 0\.0002 -> 5e-05$", printed.out, re.M), printed.out
    assert "overrides optim.lr" not in printed.err
    rows = _rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["lr"] == pytest.approx(2e-4) and rows[3]["lr"] == pytest.approx(5e-5)
    assert yaml.safe_load((out / "config.yaml").read_text())["optim"]["lr"] == 5e-5
