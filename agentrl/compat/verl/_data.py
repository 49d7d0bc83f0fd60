"""The `data.*` rules of `agentrl config import-verl`, and the env the imported rows train on.

verl's dataset keys map onto agentrl's row contract (`agentrl.rows`): `train_files` become
`data.path` (one) or `data.train_files` (several), `val_files` become `data.val_path` (the
held-out eval, over the whole split as verl evaluates it when the files can be counted), and
a `prompt_key` other than `prompt` becomes `data.columns.prompt`.

verl has no env: it picks a reward function per row by `data_source`. agentrl rewards come
from the env, so a dataset needs a `data.env` that takes rows; without `--env` the importer
reads the first row's `data_source` (when the file is here) and picks the env family verl's
default scorer for that source belongs to, with a note saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentrl.rows import count_rows, peek

if TYPE_CHECKING:
    from ._rules import Ctx

# verl's default_compute_score, by data_source, as the agentrl env that scores the same task.
_SOURCES = (
    (
        ("searchr1", "nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle"),
        "search/qa-v0",
    ),
    (
        ("code", "apps", "taco", "codeforces", "livecodebench", "humaneval", "mbpp"),
        "code/functions-v0",
    ),
    (("gsm8k", "math", "aime", "numina", "dapo", "amc", "olympiad"), "math/boxed-v0"),
)
DEFAULT_ENV = "math/boxed-v0"


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def data(c: Ctx) -> None:
    c.direct(
        {
            "data.train_batch_size": ("data.batch_size", int),
            "data.tokenizer": ("model.tokenizer", str),
        }
    )
    key = c.get("data.prompt_key")
    if key is not None and key != "prompt":
        c.put("data.columns", {"prompt": str(key)})
    train = _files(c.get("data.train_files"))
    if len(train) == 1:
        c.put("data.path", train[0])
    elif train:
        c.put("data.train_files", train)
    val = _files(c.get("data.val_files"))
    if val:
        c.put("data.val_path", val[0] if len(val) == 1 else val)
        counts = [count_rows(p) for p in val]
        if all(n is not None for n in counts):
            c.put("data.eval_episodes", int(sum(counts)))  # type: ignore[arg-type]
        else:
            c.result.notes.append(
                "val_files not readable here: the held-out eval uses the first "
                "data.eval_episodes rows (verl evaluates them all); set it to the split's size"
            )
    c.get("data.return_raw_chat")  # agentrl always renders the chat messages itself
    c.get("data.reward_fn_key")  # verl's scorer lookup; agentrl's reward is data.env's
    prompt = c.get("data.max_prompt_length")
    response = c.get("data.max_response_length")
    if response is not None:
        c.put("sampling.max_new_tokens", int(response))
        if prompt is not None:
            c.put("rollout.max_total_tokens", int(prompt) + int(response))
    for name in ("prompt_length", "response_length"):  # verl copies of the data lengths
        c.get("actor_rollout_ref.rollout." + name)
    if c.get("data.shuffle", True) is False:
        c.unmapped("data.shuffle", "agentrl always shuffles dataset rows")


def env(c: Ctx, chosen: str | None) -> None:
    """`data.env`: `--env`, else the env for the rows' `data_source`, when there are rows."""
    if chosen:
        c.put("data.env", chosen)
        return
    cfg = c.result.config.get("data", {})
    files = _files(cfg.get("path") or None) + _files(cfg.get("train_files"))
    if not files and not cfg.get("val_path"):
        return
    first = (peek(files[0]) if files else None) or {}
    source = first.get("data_source")
    picked = DEFAULT_ENV
    if isinstance(source, str):
        low = source.lower()
        picked = next((e for keys, e in _SOURCES if any(k in low for k in keys)), DEFAULT_ENV)
        why = f"the rows' data_source is {source!r}"
    else:
        why = "the training file is not readable here" if files else "no training file"
    c.put("data.env", picked)
    c.result.notes.append(
        f"data.env={picked} ({why}): verl scores rows by data_source, agentrl by the env; "
        "pass --env ID to choose (`agentrl envs list` marks the envs that take rows)"
    )
    if picked.startswith("search/"):
        c.result.notes.append("search rows need a retriever: set data.env_kwargs.retriever_url")


def steps_from_epochs(c: Ctx, epochs: int) -> int | None:
    """verl's epochs → optimizer steps, when the (local) training files can be counted."""
    cfg = c.result.config.get("data", {})
    files = _files(cfg.get("path") or None) + _files(cfg.get("train_files"))
    batch = cfg.get("batch_size")
    if not files or not batch:
        return None
    counts = [count_rows(p) for p in files]
    if any(n is None for n in counts):
        return None
    return max(1, epochs * (sum(counts) // int(batch)))  # type: ignore[arg-type]
