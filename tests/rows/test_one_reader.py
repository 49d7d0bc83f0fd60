"""Every dataset file is read by `agentrl.rows.read_dataset`, so a bad row fails the same way
wherever it is read: `<file>: row <n>: column '<c>': <why>` (the SWE task list and SkyRL
`data_path` rows had readers of their own, each failing differently)."""

from __future__ import annotations

import json

import pytest

from agentrl.rows import DatasetError


def test_swe_task_file_errors_name_file_row_and_column(tmp_path) -> None:
    from agentrl.envs.swe.tasks import DATA, load_tasks

    good = (DATA / "tasks.jsonl").read_text().splitlines()[0]
    bad = json.loads(good)
    del bad["package"]
    path = tmp_path / "tasks.jsonl"
    path.write_text(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DatasetError, match=r"tasks.jsonl: row 2: column 'package': missing"):
        load_tasks(path)
    path.write_text(good + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"tasks.jsonl: row 2: not valid JSON"):
        load_tasks(path)
    shipped = [json.loads(x)["id"] for x in (DATA / "tasks.jsonl").read_text().splitlines()]
    assert [t.id for t in load_tasks()] == shipped


def test_skyrl_data_path_rows_use_the_same_reader(tmp_path) -> None:
    from agentrl.envs.interop.skyrl_env import _load_rows

    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "2+2"}]}\n[1, 2]\n')
    with pytest.raises(DatasetError, match=r"rows.jsonl: row 2: expected a mapping"):
        _load_rows(str(path))
    path.write_text('{"prompt": "hi", "env_class": "gsm8k"}\n')
    assert _load_rows(str(path)) == [{"prompt": "hi", "env_class": "gsm8k"}]
