"""The row contract and its one reader: verl columns, column mappings, file formats, and one
error format (file, row, column) for every bad row, or skipped and counted."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from gsm8k_like import SUFFIX, TRAIN, verl_rows, write_parquet

from agentrl.config import ConfigError, DataConfig, TrainConfig, load_config
from agentrl.rows import DatasetError, Row, RowError, count_rows, read_dataset
from agentrl.trainer.data import TaskSource
from agentrl.types import Message


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_verl_row_reads_prompt_answer_source_and_info() -> None:
    row = Row(verl_rows(TRAIN)[0], file="/d/train.parquet", number=1)
    assert row.messages() == [Message("user", TRAIN[0][0] + SUFFIX)]
    assert (row.answer_text(), row.data_source) == ("72", "openai/gsm8k")
    assert row.extra_info["question"] == TRAIN[0][0]
    assert row.question_text() == TRAIN[0][0] + SUFFIX  # no question column: the user turn
    assert row.info() == {"row": 1, "file": "train.parquet", "data_source": "openai/gsm8k"}


def test_question_layout_and_column_mapping() -> None:
    plain = Row({"question": "What is 2+3?", "answer": 5})
    assert plain.task_messages("{question} Box it: \\boxed{}.") == [
        Message("user", "What is 2+3? Box it: \\boxed{}.")
    ]
    mapped = Row({"meta": {"problem": "Q?"}, "solution": "4"}, {"question": "meta.problem"})
    assert mapped.question_text() == "Q?" and mapped.columns.get("answer") is None
    assert Row({"q": "Q?", "sol": "4"}, {"question": "q", "answer": "sol"}).answer_text() == "4"
    both = Row({"prompt": "verbatim", "question": "bare", "answer": "1"})
    assert both.task_messages()[0].content == "verbatim"
    assert both.task_messages("Q: {question}", prefer="question")[0].content == "Q: bare"
    # verl's ground truth first, then `answer`, then FlashRAG's `golden_answers`
    assert Row({"answer": "a", "golden_answers": ["b"]}).get("answer") == "a"
    assert Row({"golden_answers": ["b"]}).get("answer") == ["b"]


@pytest.mark.parametrize(
    ("row", "column", "why"),
    [
        ({"question": "q"}, "reward_model.ground_truth", "missing \\(nor 'answer', 'golden"),
        ({"prompt": 3, "answer": "1"}, "prompt", "expected chat messages or non-empty text"),
        ({"prompt": [{"role": "bot", "content": "x"}], "answer": "1"}, "prompt", "message 0"),
        (
            {"prompt": [{"role": "user", "content": 1}], "answer": "1"},
            "prompt",
            "message 0: content",
        ),
        (
            {"prompt": [{"role": "system", "content": "s"}], "answer": "1"},
            "prompt",
            "the chat messages have no user",
        ),
        ({"prompt": "p", "answer": [1, 2]}, "answer", "expected a non-empty string or number"),
        ({"prompt": "p", "answer": True}, "answer", "expected a non-empty string or number"),
        ({"answer": "1"}, "prompt", "missing: a row needs a prompt"),
        ({"prompt": "p", "answer": "1", "data_source": 7}, "data_source", "expected text"),
    ],
)
def test_bad_rows_name_file_row_and_column(tmp_path: Path, row, column, why) -> None:
    from agentrl.envs.math.boxed import BoxedMathEnv

    path = jsonl(tmp_path / "d.jsonl", [{"prompt": "ok", "answer": "1"}, row])
    check = BoxedMathEnv.read_row
    with pytest.raises(DatasetError, match=f"d.jsonl: row 2: column '{column}': {why}"):
        read_dataset(path, check=check)
    skipped = read_dataset(path, check=check, on_bad_row="skip")
    assert (len(skipped), skipped.skipped) == (1, 1) and "row 2" in skipped.first_error


def test_unreadable_rows_and_files(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "d.jsonl", [{"prompt": "x"}, "", "{oops", "[1, 2]"])
    with pytest.raises(DatasetError, match=r"d\.jsonl: row 3: not valid JSON"):
        read_dataset(path)
    ds = read_dataset(path, on_bad_row="skip")
    assert (len(ds), ds.skipped) == (1, 2)  # the JSON line and the list row (line 4)
    with pytest.raises(DatasetError, match="no rows; all 1 rows are bad"):
        read_dataset(jsonl(tmp_path / "e.jsonl", ["7"]), on_bad_row="skip")
    with pytest.raises(DatasetError, match="no rows"):
        read_dataset(jsonl(tmp_path / "f.jsonl", []))
    with pytest.raises(FileNotFoundError, match="no such dataset file"):
        read_dataset(tmp_path / "missing.parquet")
    with pytest.raises(DatasetError, match="unsupported format"):
        read_dataset(jsonl(tmp_path / "d.csv", []))
    (tmp_path / "folder").mkdir()
    with pytest.raises(DatasetError, match="save_to_disk"):
        read_dataset(tmp_path / "folder")


def test_a_non_utf8_line_names_file_and_line_or_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "bad \xff\xfe"}\n{"prompt": "ok too"}\n')
    with pytest.raises(DatasetError, match=r"d\.jsonl: row 2: not UTF-8 text \(byte 0xff"):
        read_dataset(path)
    ds = read_dataset(path, on_bad_row="skip")
    assert (len(ds), ds.skipped) == (2, 1)
    assert "row 2: not UTF-8" in ds.first_error
    array = tmp_path / "a.json"
    array.write_bytes(b'[{"prompt": "\xff"}]')
    with pytest.raises(DatasetError, match=r"a\.json: row 1: not UTF-8 text"):
        read_dataset(array)


def test_formats_parquet_json_array_gzip_and_several_files(tmp_path: Path) -> None:
    rows = verl_rows(TRAIN)
    pq = write_parquet(tmp_path / "a.parquet", rows[:2])
    array = tmp_path / "b.json"
    array.write_text(json.dumps(rows[2:3]))
    gz = tmp_path / "c.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(json.dumps(rows[3]) + "\n")
    ds = read_dataset([pq, array, gz])
    assert [r.answer_text() for r in ds.rows] == [g for _, g in TRAIN]
    assert [(Path(r.file).name, r.number, r.index) for r in ds.rows] == [
        ("a.parquet", 1, 0),
        ("a.parquet", 2, 1),
        ("b.json", 1, 2),
        ("c.jsonl.gz", 1, 3),
    ]
    assert [count_rows(p) for p in (pq, array, gz)] == [2, 1, 1]


def test_hf_datasets_folders(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="HF datasets folders need agentrl[datasets]")
    rows = verl_rows(TRAIN)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    assert [r.messages() for r in read_dataset(tmp_path / "ds").rows] == [
        Row(r).messages() for r in rows
    ]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DatasetError, match=r"holds the splits \['train'\]; name one, e\.g\."):
        read_dataset(tmp_path / "dd")
    assert len(read_dataset(tmp_path / "dd" / "train")) == 4


def test_config_checks_the_env_and_the_mapping_at_load(tmp_path: Path) -> None:
    def load(*overrides: str) -> TrainConfig:
        return load_config(TrainConfig, None, list(overrides))

    with pytest.raises(ConfigError, match=r"'vision/zoom-v0' \(ZoomEnv\) cannot take dataset"):
        load("data.env=vision/zoom-v0", "data.path=x.parquet")
    with pytest.raises(ConfigError, match="math/\\*"):  # says which envs do
        load("data.env=games/guess-number-v0", "data.train_files=[a.parquet]")
    with pytest.raises(ConfigError, match="both set"):
        load("data.env=math/boxed-v0", "data.path=a", "data.train_files=[b]")
    with pytest.raises(ConfigError, match="data.columns.anwser: unknown row field.*'answer'"):
        load("data.env=math/boxed-v0", "data.path=a", "data.columns={anwser: x}")
    with pytest.raises(ConfigError, match="no dataset is"):
        load("data.columns={answer: x}")
    # An env's own row fields may be mapped too (reasoning-gym's entry metadata).
    cfg = load("data.env=rg/chain_sum-v0", "data.path=a", "data.columns={metadata: meta}")
    assert cfg.data.columns == {"metadata": "meta"}


def test_task_source_reads_train_and_val_and_describes_them(tmp_path: Path) -> None:
    train = write_parquet(tmp_path / "t.parquet", verl_rows(TRAIN))
    bad = [*verl_rows(TRAIN[:2]), {"prompt": "no answer"}]
    val = jsonl(tmp_path / "v.jsonl", bad)
    cfg = DataConfig(
        env="math/boxed-v0", path=str(train), val_path=str(val), on_bad_row="skip", batch_size=2
    )
    src = TaskSource(cfg, seed=0)
    assert all(isinstance(r, Row) for r in src.next_batch())
    assert [r.answer_text() for r in src.eval_items(5)] == ["72", "30"]  # file order
    assert src.skipped == 1
    assert src.demo_items(6)[4] is src.rows[0]  # SFT demos: the training rows, cycled
    lines = src.describe()
    assert "train 4 rows from" in lines[0] and "skipped 1 bad rows" in lines[1]
    no_val = TaskSource(DataConfig(env="math/boxed-v0", path=str(train)), seed=0)
    assert no_val.eval_items() == [] and "no data.val_path" in no_val.describe()[1]
    seeds = TaskSource(DataConfig(env="math/boxed-v0", val_path=str(val), on_bad_row="skip"), 0)
    assert isinstance(seeds.next_batch()[0], int) and len(seeds.eval_items()) == 2


def test_an_env_that_does_not_take_rows_never_ignores_one() -> None:
    from agentrl.envs import Task, ToolEnv

    class Generated(ToolEnv):
        def new_task(self, rng, options):  # would silently generate if reached
            return Task([Message("user", "generated")], answer="1")

        def score(self, final):
            return 0.0

    with pytest.raises(RowError, match="Generated does not take dataset rows"):
        Generated().reset(seed=0, options={"row": Row({"prompt": "p", "answer": "1"})})


def test_hf_folder_without_the_datasets_package_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "state.json").write_text("{}")
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # as if not installed
    with pytest.raises(DatasetError, match=r"pip install 'agentrl\[datasets\]'"):
        read_dataset(tmp_path / "ds")
