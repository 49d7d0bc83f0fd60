"""`search/qa-v0`: Search-R1 style question answering with a `search` tool.

* Observation: a question about an invented country ("What is the capital of Zorland?"), or a
  dataset row (`data.path`, docs/datasets.md: its `question` in the prompt below, else its
  `prompt` verbatim); search results come back as `tool` messages (`Doc 1(Title: ...) ...`).
* Tools: `search(query)`, served by a local BM25 retrieval service over the synthetic corpus
  (`corpus.py`, `retriever.py`) or by any Search-R1 compatible server at `retriever_url`.
* Reward: exact match (`reward="em"`) or token F1 (`reward="f1"`) of the answer in the last
  `<answer>...</answer>` (else the whole message) against the gold answers, after SQuAD
  normalisation (lowercase, no punctuation or articles).
* Termination: a message without tool calls ends the episode; `max_turns` truncates.
* Difficulty: `hops` (1, or 2 = the country is named only through another fact),
  `n_countries` (corpus size: more distractors), `topk` (documents per search).
* Data: the synthetic corpus by default; rows from `data.path` or `qa_path` (the same row
  contract: `question` and gold answers in `reward_model.ground_truth` (text, a list, or
  Search-R1's `{target: [...]}`), `answer` or FlashRAG's `golden_answers`), plus
  `retriever_url` for a real corpus.
* Oracle: search each hop's query, then answer the gold only if a search result contains it,
  so passing `check_env` proves the retriever actually surfaces the answer.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.rows import Row, RowError, read_dataset
from agentrl.tools.search import SearchTools
from agentrl.types import Message, ToolCall

from ..core import Observation, Task, ToolEnv
from .corpus import Corpus
from .retriever import shared_server

PROMPT = (
    "Answer the question. Use the search tool to look up facts you do not know, as many "
    "times as you need. Give only the final answer inside <answer>...</answer>.\n\n"
    "Question: {question}"
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def exact_match(pred: str, golds: list[str]) -> float:
    return float(any(normalize(pred) == normalize(g) for g in golds))


def f1(pred: str, golds: list[str]) -> float:
    def one(gold: str) -> float:
        p, g = normalize(pred).split(), normalize(gold).split()
        common = sum((Counter(p) & Counter(g)).values())
        return 0.0 if common == 0 else 2 * common / (len(p) + len(g))

    return max(one(g) for g in golds)


class SearchQAEnv(ToolEnv):
    family = "search"
    description = "Search-R1 style QA with a BM25 search tool over a synthetic corpus."
    max_turns = 6
    accepts_rows = True

    def __init__(
        self,
        hops: int = 1,
        n_countries: int = 30,
        topk: int = 3,
        reward: str = "em",
        retriever_url: str | None = None,
        qa_path: str | Path | None = None,
        corpus_seed: int = 0,
        max_turns: int | None = None,
    ) -> None:
        if reward not in ("em", "f1"):
            raise ValueError(f"reward must be 'em' or 'f1', got {reward!r}")
        self.corpus = Corpus(n_countries, corpus_seed) if qa_path is None else None
        if retriever_url is None:
            if self.corpus is None:
                raise ValueError("qa_path needs retriever_url: the synthetic index has no answers")
            retriever_url = shared_server(("synthetic", n_countries, corpus_seed), self.corpus.docs)
        super().__init__(SearchTools(retriever_url, topk), max_turns)
        self.hops, self.reward = hops, reward
        self.rows = read_dataset(qa_path, check=self.read_row).rows if qa_path else None
        self._seen = ""

    @classmethod
    def read_row(cls, row: Row) -> Task:
        q = row.question_text()
        msgs = row.task_messages(PROMPT, prefer="question")
        return Task(msgs, answer=_golds(row), info={"question": q, "queries": [q], **row.info()})

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        self._seen = ""
        if "row" in options:
            return self.read_row(options["row"])
        if self.rows is not None:
            return self.read_row(self.rows[int(options.get("index", rng.integers(len(self.rows))))])
        assert self.corpus is not None
        item = self.corpus.question(rng, self.hops)
        q, golds, queries = item.question, [item.answer], item.queries
        msg = Message("user", PROMPT.format(question=q))
        return Task([msg], answer=golds, info={"question": q, "queries": queries})

    def score(self, final: Message) -> float:
        assert self.task is not None
        found = _ANSWER.findall(final.content)
        pred = found[-1] if found else final.content
        fn = exact_match if self.reward == "em" else f1
        return fn(pred, self.task.answer)

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        out = await super().astep(action)
        self._seen += "\n".join(m.content for m in out[0].messages)  # for the oracle
        return out

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        queries = self.task.info["queries"]
        if self.turn < len(queries):
            call = ToolCall("search", {"query": queries[self.turn]}, id=f"call_{self.turn}")
            return Message("assistant", "", tool_calls=[call])
        hit = [g for g in self.task.answer if normalize(g) in normalize(self._seen)]
        return Message("assistant", f"<answer>{hit[0] if hit else 'unknown'}</answer>")


def _golds(row: Row) -> list[str]:
    """Gold answers: text, a list of texts, or Search-R1's `{"target": [...]}`."""
    gold = row.get("answer")
    if isinstance(gold, dict) and "target" in gold:
        gold = gold["target"]
    golds = [gold] if isinstance(gold, (str, int, float)) else gold
    if (
        not isinstance(golds, list)
        or not golds
        or not all(isinstance(g, (str, int, float)) and str(g).strip() for g in golds)
    ):
        raise RowError(
            row.column("answer"), f"expected gold answer text or a list, got {gold!r:.80}"
        )
    return [str(g) for g in golds]
