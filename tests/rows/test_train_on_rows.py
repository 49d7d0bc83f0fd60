"""`agentrl train` on dataset rows, for real: the episodes are the dataset's questions and the
rewards are checked against its ground truth (parquet, JSONL with a column mapping, several
files, HF `load_from_disk` folders, a validation split, and `config import-verl` output).

Each run is the real CLI in-process on the tiny model, one or two steps. A spy on the rollout
records every episode (train and held-out eval) so the test can compare each prompt with the
file it came from and recompute each reward from the answer and the row's ground truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gsm8k_like import (
    SUFFIX,
    TRAIN,
    VAL,
    RolloutSpy,
    answer_of,
    prompt_of,
    verl_rows,
    write_parquet,
)

from agentrl.cli import main
from agentrl.envs.math.boxed import BoxedMathEnv
from agentrl.envs.math.verify import is_equivalent

pytestmark = pytest.mark.timeout(600)
GOLD = {q + SUFFIX: g for q, g in TRAIN}
VAL_GOLD = {q + SUFFIX: g for q, g in VAL}


def tiny(out: Path, cache: Path, **extra: object) -> list[str]:
    """The smallest run: tiny model, 2 samples of one 24-token turn, no SFT or eval unless
    asked."""
    keys = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": cache,
        "rollout.n": 2,
        "rollout.max_turns": 1,
        "sampling.max_new_tokens": 24,
        "rollout.max_total_tokens": 256,
        "data.batch_size": 4,
        "data.eval_episodes": 0,
        "trainer.steps": 1,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 8,
        "trainer.tensorboard": "false",
        "trainer.out_dir": out,
        # the packaged quickstart (the default config) has a long SFT and periodic evals
        "sft.steps": 0,
        "trainer.eval_every": 0,
        "trainer.save_every": 0,
        "trainer.dump_rollouts_every": 0,
    }
    keys |= {k.replace("__", "."): v for k, v in extra.items()}
    return [f"{k}={v}" for k, v in keys.items()]


def check_rewards(trajs: list, gold: dict[str, str]) -> None:
    """Every episode shows a dataset prompt; its reward is math-verify against that row's
    ground truth (0 when the answer ran out of tokens before the env could score it)."""
    assert trajs
    for t in trajs:
        assert prompt_of(t) in gold, prompt_of(t)
        right = t.termination == "done" and is_equivalent(answer_of(t), gold[prompt_of(t)])
        assert t.reward == float(right), (answer_of(t), gold[prompt_of(t)], t.termination)


def test_verl_parquet_with_val_split_drives_training_and_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agentrl_cache: Path, capsys
) -> None:
    train = write_parquet(tmp_path / "train.parquet", verl_rows(TRAIN))
    val = write_parquet(tmp_path / "test.parquet", verl_rows(VAL, "test"))
    spy = RolloutSpy(monkeypatch)
    # SFT on the rows' gold answers first (the env's oracle boxes the ground truth), so some
    # sampled answers are right and a reward of 1 shows the ground truth really is used.
    args = tiny(
        tmp_path / "run",
        agentrl_cache,
        data__path=train,
        data__val_path=val,
        data__eval_episodes=2,
        trainer__steps=2,
        sampling__temperature=0.3,
        sft__steps=40,
        sft__lr=5e-3,
        sft__demos=4,
        sft__batch_size=4,
    )
    assert main(["train", "--env", "math/boxed-v0", *args]) == 0
    check_rewards(spy.train, GOLD)
    assert len(spy.train) == 2 * 4 * 2  # steps × prompts × samples
    assert {prompt_of(t) for t in spy.train} == set(GOLD)  # 2 epochs: every row was a task
    assert any(t.reward == 1.0 for t in spy.train)
    # held-out eval: the validation rows, untouched (before SFT), before RL and after
    check_rewards(spy.eval, VAL_GOLD)
    assert sorted(prompt_of(t) for t in spy.eval) == sorted([*VAL_GOLD] * 3)
    evals = [json.loads(x) for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [e["episodes"] for e in evals] == [2.0, 2.0]
    untouched = (tmp_path / "run" / "untouched.jsonl").read_text().splitlines()
    assert [json.loads(x)["episodes"] for x in untouched] == [2.0]
    out = capsys.readouterr().out
    assert "data: train 4 rows from" in out and "data: val 2 rows from" in out


def test_jsonl_with_a_column_mapping_skips_and_counts_bad_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agentrl_cache: Path, capsys
) -> None:
    path = tmp_path / "train.jsonl"
    lines = [json.dumps({"problem": q, "solution": g}) for q, g in TRAIN]
    lines.insert(2, json.dumps({"problem": "What is 1+1?"}))  # row 3: no solution
    lines.append("{not json")  # row 6
    path.write_text("\n".join(lines) + "\n")
    mapping = "{question: problem, answer: solution}"
    base = dict(data__path=path, data__columns=mapping)
    # Bad rows are an error by default: one message with file, row and column.
    assert main(["train", "--env", "math/boxed-v0", *tiny(tmp_path / "a", agentrl_cache, **base)])
    assert f"{path}: row 3: column 'solution': missing" in capsys.readouterr().err
    spy = RolloutSpy(monkeypatch)
    args = tiny(tmp_path / "b", agentrl_cache, **base, data__on_bad_row="skip")
    assert main(["train", "--env", "math/boxed-v0", *args]) == 0
    # A question (not a prompt) is wrapped in the env's own instruction.
    check_rewards(spy.train, {f"{q}\n\n{BoxedMathEnv.instruction}": g for q, g in TRAIN})
    assert "skipped 2 bad rows" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["data/skipped_rows"] == 2


def test_several_train_files_are_one_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agentrl_cache: Path
) -> None:
    rows = verl_rows(TRAIN)
    first = write_parquet(tmp_path / "part0.parquet", rows[:2])
    second = tmp_path / "part1.jsonl"
    second.write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    spy = RolloutSpy(monkeypatch)
    args = tiny(tmp_path / "run", agentrl_cache, data__train_files=f"[{first}, {second}]")
    assert main(["train", "--env", "math/boxed-v0", *args]) == 0
    check_rewards(spy.train, GOLD)
    assert {prompt_of(t) for t in spy.train} == set(GOLD)  # one batch of 4: both files


def test_load_from_disk_folders_for_train_and_val(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agentrl_cache: Path
) -> None:
    datasets = pytest.importorskip("datasets", reason="HF datasets folders need agentrl[datasets]")
    datasets.Dataset.from_list(verl_rows(TRAIN)).save_to_disk(str(tmp_path / "train_ds"))
    splits = {"train": verl_rows(TRAIN), "test": verl_rows(VAL, "test")}
    dd = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()})
    dd.save_to_disk(str(tmp_path / "gsm8k"))
    spy = RolloutSpy(monkeypatch)
    args = tiny(
        tmp_path / "run",
        agentrl_cache,
        data__path=tmp_path / "train_ds",
        data__val_path=tmp_path / "gsm8k" / "test",  # one split of a DatasetDict
        data__eval_episodes=2,
    )
    assert main(["train", "--env", "math/boxed-v0", *args]) == 0
    check_rewards(spy.train, GOLD)
    assert {prompt_of(t) for t in spy.train} == set(GOLD)
    check_rewards(spy.eval, VAL_GOLD)
    assert sorted(prompt_of(t) for t in spy.eval) == sorted([*VAL_GOLD] * 2)


def test_import_verl_output_trains_on_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agentrl_cache: Path
) -> None:
    train = write_parquet(tmp_path / "train.parquet", verl_rows(TRAIN))
    val = write_parquet(tmp_path / "test.parquet", verl_rows(VAL, "test"))
    verl = {
        "data": {
            "train_files": [str(train)],
            "val_files": [str(val)],
            "prompt_key": "prompt",
            "train_batch_size": 4,
            "max_prompt_length": 232,
            "max_response_length": 24,
        },
        "actor_rollout_ref": {
            "model": {"path": "tiny:qwen2"},
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 8},
            "rollout": {"n": 2},
        },
        "trainer": {
            "total_training_steps": 1,
            "test_freq": -1,
            "logger": ["console"],
            "default_local_dir": str(tmp_path / "run"),
        },
    }
    src, out = tmp_path / "verl.yaml", tmp_path / "agentrl.yaml"
    src.write_text(yaml.safe_dump(verl))
    assert main(["config", "import-verl", str(src), "--out", str(out)]) == 0  # no --env
    data = yaml.safe_load(out.read_text())["data"]
    assert (data["env"], data["path"], data["val_path"]) == ("math/boxed-v0", str(train), str(val))
    assert data["eval_episodes"] == 2  # verl evaluates the whole validation split
    spy = RolloutSpy(monkeypatch)
    extra = [f"model.cache_dir={agentrl_cache}", "rollout.max_turns=1", "trainer.tensorboard=false"]
    assert main(["train", "--config", str(out), *extra]) == 0
    check_rewards(spy.train, GOLD)
    assert {prompt_of(t) for t in spy.train} == set(GOLD)
    check_rewards(spy.eval, VAL_GOLD)


def test_dataset_with_an_env_that_cannot_take_rows_fails_at_config_load(
    tmp_path: Path, capsys
) -> None:
    train = write_parquet(tmp_path / "train.parquet", verl_rows(TRAIN))
    assert main(["train", "--env", "games/wordle-v0", f"data.path={train}"]) == 2
    err = capsys.readouterr().err  # usage and config errors: one line on stderr
    assert "config error" in err and "'games/wordle-v0' (WordleTextEnv) cannot take" in err
    assert main(["config", "show", "data.env=games/wordle-v0", f"data.val_path={train}"]) == 2


def test_rollout_cli_samples_dataset_rows(tmp_path: Path, agentrl_cache: Path, monkeypatch) -> None:
    from agentrl.types import read_jsonl

    monkeypatch.setenv("AGENTRL_CACHE", str(agentrl_cache))
    train = write_parquet(tmp_path / "train.parquet", verl_rows(TRAIN))
    out = tmp_path / "traj.jsonl"
    args = ["rollout", "--env", "math/boxed-v0", "--model", "tiny:qwen2", "--data", str(train)]
    args += [
        "--seed",
        "1",
        "--episodes",
        "2",
        "--n",
        "1",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    trajs = list(read_jsonl(out))
    assert [prompt_of(t) for t in trajs] == [q + SUFFIX for q, _ in TRAIN[1:3]]
    check_rewards(trajs, GOLD)
    assert main([*args[:5], "--data", str(tmp_path / "missing.jsonl")]) == 2
