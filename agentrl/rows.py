"""The dataset row contract: how one row of a dataset poses an episode, and the one reader.

Why one module: a verl user points `data.path` at a GSM8K parquet and expects its questions to
be the episodes, scored against its ground truth. Every env that takes rows reads them through
`Row`, so a column means the same thing in every env, and every bad row fails the same way:

    <file>: row <n>: column '<column>': <what is wrong>

`n` counts from 1 (in JSONL it is the line number). With `data.on_bad_row: skip` the row is
dropped and counted instead (`Dataset.skipped`); the trainer logs the count.

Fields (docs/datasets.md) and the columns read by default, first present wins:

    prompt       prompt                     chat messages [{role, content}] or text, shown verbatim
    question     question                   plain text; the env wraps it in its own instruction
    answer       reward_model.ground_truth, answer, golden_answers    the ground truth
    data_source  data_source                text, kept in the episode's info
    extra_info   extra_info                 a mapping, kept with the row

`data.columns` maps a field to another column, dotted to reach into a nested one:
`{question: problem, answer: solution}`. An env may read more fields (its `row_fields`).

Files: parquet, JSONL (`.jsonl`, `.json`, either gzipped; a `.json` holding one array works
too), or a folder written by HF `datasets`' `save_to_disk` (needs `agentrl[datasets]`).
"""

from __future__ import annotations

import difflib
import gzip
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from agentrl.types import Message

if TYPE_CHECKING:
    from agentrl.envs.core import AgentEnv

DEFAULT_COLUMNS: dict[str, tuple[str, ...]] = {
    "prompt": ("prompt",),
    "question": ("question",),
    "answer": ("reward_model.ground_truth", "answer", "golden_answers"),
    "data_source": ("data_source",),
    "extra_info": ("extra_info",),
}
PROMPT_ROLES = ("system", "user", "assistant")
_MISSING: Any = object()


class DatasetError(ValueError):
    """A dataset file or row is unusable; the message names the file, row and column."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """A dataset path that does not exist."""


class RowError(ValueError):
    """One row breaks the contract: raised by `Row`'s accessors and by envs' `read_row`."""

    def __init__(self, column: str | None, why: str) -> None:
        super().__init__(f"column {column!r}: {why}" if column else why)
        self.column, self.why = column, why

    def at(self, file: str, number: int) -> DatasetError:
        return DatasetError(f"{file}: row {number}: {self}")


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


@dataclass
class Row:
    """One dataset row: its columns, the field -> column mapping, and where it came from.

    `index` is the row's position in the whole dataset (all files, bad rows left out): the
    episode's reset seed, stable across runs. Envs read it through the accessors below, each of
    which raises `RowError` naming the column when the row does not fit.
    """

    data: dict[str, Any]
    columns: Mapping[str, str] = field(default_factory=dict)
    file: str = ""
    number: int = 0
    index: int = 0

    def candidates(self, name: str) -> tuple[str, ...]:
        mapped = self.columns.get(name)
        return (mapped,) if mapped else DEFAULT_COLUMNS.get(name, (name,))

    def _lookup(self, column: str) -> Any:
        if column in self.data:
            return self.data[column]
        node: Any = self.data
        for part in column.split("."):
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def column(self, name: str) -> str:
        """The column that holds field `name` (the first candidate when none does)."""
        cols = self.candidates(name)
        return next((c for c in cols if self._lookup(c) not in (_MISSING, None)), cols[0])

    def has(self, name: str) -> bool:
        return any(self._lookup(c) not in (_MISSING, None) for c in self.candidates(name))

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """Field `name`'s value; a null counts as missing. Missing without a default raises."""
        cols = self.candidates(name)
        for c in cols:
            value = self._lookup(c)
            if value is not _MISSING and value is not None:
                return value
        if default is not _MISSING:
            return default
        also = f" (nor {', '.join(repr(c) for c in cols[1:])})" if len(cols) > 1 else ""
        raise RowError(cols[0], f"missing{also}; map another column with data.columns.{name}")

    def text(self, name: str) -> str:
        value = self.get(name)
        if not isinstance(value, str) or not value.strip():
            raise RowError(self.column(name), f"expected non-empty text, got {_show(value)}")
        return value

    def answer_text(self) -> str:
        """The ground truth as text: a non-empty string or a number."""
        gold = self.get("answer")
        if isinstance(gold, bool) or not isinstance(gold, (str, int, float)) or not str(gold):
            col = self.column("answer")
            raise RowError(col, f"expected a non-empty string or number, got {_show(gold)}")
        return str(gold)

    def messages(self) -> list[Message]:
        """The `prompt` field as chat messages (text becomes one user message)."""
        prompt, col = self.get("prompt"), self.column("prompt")
        if isinstance(prompt, str) and prompt.strip():
            return [Message("user", prompt)]
        if not isinstance(prompt, list) or not prompt:
            raise RowError(col, f"expected chat messages or non-empty text, got {_show(prompt)}")
        out = []
        for i, m in enumerate(prompt):
            if not isinstance(m, dict) or m.get("role") not in PROMPT_ROLES:
                raise RowError(col, f"message {i}: needs a role in {PROMPT_ROLES}, got {_show(m)}")
            if not isinstance(m.get("content"), str):
                raise RowError(col, f"message {i}: content must be text, got {_show(m)}")
            out.append(Message(m["role"], m["content"]))
        if not any(m.role == "user" for m in out):
            raise RowError(col, "the chat messages have no user message")
        return out

    def question_text(self) -> str:
        """The question: the `question` field, else the last user message of the prompt."""
        if self.has("question") or not self.has("prompt"):
            return self.text("question")
        return next(m.content for m in reversed(self.messages()) if m.role == "user")

    def task_messages(
        self, template: str = "{question}", prefer: Literal["prompt", "question"] = "prompt"
    ) -> list[Message]:
        """What the episode shows: the prompt verbatim, or the question put in for
        `{question}` in the env's `template`; `prefer` picks when the row has both (verl rows
        often do)."""
        order = ("prompt", "question") if prefer == "prompt" else ("question", "prompt")
        for name in order:
            if self.has(name):
                if name == "prompt":
                    return self.messages()
                return [Message("user", template.replace("{question}", self.text("question")))]
        raise RowError(
            self.candidates("prompt")[0],
            "missing: a row needs a prompt (chat messages or text) or a question column "
            "(map one with data.columns.prompt / data.columns.question)",
        )

    @property
    def data_source(self) -> str:
        value = self.get("data_source", "")
        if not isinstance(value, str):
            raise RowError(self.column("data_source"), f"expected text, got {_show(value)}")
        return value

    @property
    def extra_info(self) -> dict[str, Any]:
        value = self.get("extra_info", {})
        if not isinstance(value, dict):
            raise RowError(self.column("extra_info"), f"expected a mapping, got {_show(value)}")
        return value

    def info(self) -> dict[str, Any]:
        """Where the row came from, for the episode's reset info."""
        out: dict[str, Any] = {"row": self.number, "file": Path(self.file).name}
        if self.data_source:
            out["data_source"] = self.data_source
        return out


# ----------------------------------------------------------------------- reading files
@dataclass
class Dataset:
    rows: list[Row]
    files: list[str]
    skipped: int = 0
    first_error: str = ""

    def __len__(self) -> int:
        return len(self.rows)

    def summary(self) -> str:
        names = ", ".join(self.files)
        line = f"{len(self.rows)} rows from {names}"
        if self.skipped:
            line += f"; skipped {self.skipped} bad rows (first: {self.first_error})"
        return line


class _Unreadable:
    def __init__(self, why: str) -> None:
        self.why = why


def _decode(raw: bytes) -> str | _Unreadable:
    """One line as text; a line that is not UTF-8 is one bad row, not a dead reader."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 1].hex()
        return _Unreadable(f"not UTF-8 text (byte 0x{bad} at offset {e.start}); re-save as UTF-8")


def _jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    # Read bytes and decode per line, so a non-UTF-8 line names its file and line (and
    # `on_bad_row: skip` can drop it) instead of a bare UnicodeDecodeError from the reader.
    opener: Any = gzip.open if path.suffix == ".gz" else open
    is_json = path.name.endswith((".json", ".json.gz"))
    with opener(path, "rb") as f:
        first = ""
        for number, raw in enumerate(f, 1):
            line = _decode(raw)
            if isinstance(line, _Unreadable):
                yield number, line
                continue
            if not line.strip():
                continue
            if not first and line.lstrip().startswith("[") and is_json:
                rest = _decode(raw + f.read())  # a .json file holding one array of objects
                if isinstance(rest, _Unreadable):
                    yield number, rest
                    return
                try:
                    items = json.loads(rest)
                except json.JSONDecodeError as e:
                    yield number, _Unreadable(f"not valid JSON ({e.msg})")
                    return
                yield from enumerate(items, 1)
                return
            first = line
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as e:
                yield number, _Unreadable(f"not valid JSON ({e.msg})")


def _hf_folder(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import datasets
    except ImportError:
        raise DatasetError(
            f"{path}: a HF datasets folder needs the datasets package: "
            "pip install 'agentrl[datasets]'"
        ) from None
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        splits = sorted(ds)
        raise DatasetError(f"{path}: holds the splits {splits}; name one, e.g. {path / splits[0]}")
    yield from enumerate(ds, 1)


def _raw_rows(path: Path) -> Iterator[tuple[int, Any]]:
    if not path.exists():
        raise DatasetNotFoundError(f"{path}: no such dataset file or folder")
    if path.is_dir():
        if not (path / "state.json").exists() and not (path / "dataset_dict.json").exists():
            raise DatasetError(
                f"{path}: a folder must be written by datasets' save_to_disk (no state.json); "
                "name parquet/JSONL files in data.train_files instead"
            )
        yield from _hf_folder(path)
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from enumerate(pq.read_table(path).to_pylist(), 1)
    elif ".jsonl" in path.suffixes or ".json" in path.suffixes:
        yield from _jsonl(path)
    else:
        raise DatasetError(
            f"{path}: unsupported format; use .parquet, .jsonl, .json (optionally .gz) "
            "or a datasets.save_to_disk folder"
        )


def as_paths(paths: str | Path | Sequence[str | Path]) -> list[str]:
    return [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]


def read_dataset(
    paths: str | Path | Sequence[str | Path],
    *,
    columns: Mapping[str, str] | None = None,
    check: Callable[[Row], Any] | None = None,
    on_bad_row: Literal["error", "skip"] = "error",
) -> Dataset:
    """Every row of `paths`, in order, each checked by `check` (an env's `read_row`).

    A bad row (not JSON, not a mapping, or `check` raising `RowError`) raises `DatasetError`
    naming file, row and column, or with `on_bad_row="skip"` is left out and counted.
    """
    files = as_paths(paths)
    if not files:
        raise DatasetError("no dataset files given")
    cols = dict(columns or {})
    rows: list[Row] = []
    out = Dataset(rows, files)
    for file in files:
        for number, raw in _raw_rows(Path(file).expanduser()):
            try:
                if isinstance(raw, _Unreadable):
                    raise RowError(None, raw.why)
                if not isinstance(raw, dict):
                    raise RowError(None, f"expected a mapping of columns, got {_show(raw)}")
                row = Row(raw, cols, file, number, len(rows))
                if check is not None:
                    check(row)
            except RowError as e:
                if on_bad_row == "error":
                    raise e.at(file, number) from None
                out.skipped += 1
                out.first_error = out.first_error or str(e.at(file, number))
                continue
            rows.append(row)
    if not rows:
        why = f"; all {out.skipped} rows are bad (first: {out.first_error})" if out.skipped else ""
        raise DatasetError(f"{', '.join(files)}: no rows{why}")
    return out


def peek(path: str | Path) -> dict[str, Any] | None:
    """The first row of a local dataset file or folder as read, or None if unreadable."""
    try:
        for _, raw in _raw_rows(Path(path).expanduser()):
            return raw if isinstance(raw, dict) else None
    except (OSError, ValueError):
        return None
    return None


def count_rows(path: str | Path) -> int | None:
    """Rows in a local dataset file or folder without reading them all; None if unreadable."""
    p = Path(path).expanduser()
    try:
        if p.suffix == ".parquet" and p.is_file():
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(p).metadata.num_rows)
        return sum(1 for _ in _raw_rows(p))
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------- envs that take rows
def rows_env(env_id: str) -> type[AgentEnv]:
    """The env class of `env_id` if it takes dataset rows; else a ValueError naming the env."""
    from agentrl.envs import all_specs, spec

    try:
        s = spec(env_id)
    except KeyError as e:
        raise ValueError(f"data.env: {e.args[0]}") from None
    if s.takes_rows():  # so its entry point is an AgentEnv class
        return cast("type[AgentEnv]", s.load())
    families = sorted({t.id.split("/")[0] + "/*" for t in all_specs() if t.takes_rows()})
    target = s.load()
    name = target.__name__ if isinstance(target, type) else repr(target)
    raise ValueError(
        f"data.env: {env_id!r} ({name}) cannot take dataset rows, so data.path / "
        f"data.train_files / data.val_path would be ignored. Envs that take rows: "
        f"{', '.join(families)} (`agentrl envs list` marks them); or drop the dataset keys "
        "to train on the env's own tasks."
    )


def check_columns(columns: Mapping[str, str], env_cls: type[AgentEnv]) -> None:
    """`data.columns` keys must be fields the contract or the env (`row_fields`) knows."""
    known = [*DEFAULT_COLUMNS, *env_cls.row_fields]
    for key, column in columns.items():
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(
                f"data.columns.{key}: unknown row field{hint}; fields: {', '.join(known)}"
            )
        if not isinstance(column, str) or not column:
            raise ValueError(f"data.columns.{key}: expected a column name, got {column!r}")
