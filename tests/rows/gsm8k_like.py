"""A small GSM8K-like dataset in verl's layout, and a spy on the rollout, for the dataset tests.

The questions are original (not GSM8K's) but shaped like verl's `gsm8k.py` preprocessing:
`prompt` as chat messages with verl's instruction suffix, `reward_model.ground_truth`,
`data_source`, `extra_info`.
"""

from __future__ import annotations

from typing import Any

from agentrl.rollout.runner import RolloutRunner

SUFFIX = ' Let\'s think step by step and output the final answer after "####".'
TRAIN = [
    ("A baker fills 12 trays with 6 rolls each. How many rolls does she bake?", "72"),
    ("Ravi walks 3 km to school and 3 km back, five days a week. How far per week?", "30"),
    ("A garden has 9 rows of 4 tulips and 7 roses. How many flowers are there?", "43"),
    ("Mia reads 15 pages a day for 8 days, then 11 more pages. How many pages?", "131"),
]
VAL = [
    ("A bus seats 40 people. How many people fit in 3 buses and a van of 9?", "129"),
    ("Leo buys 5 packs of 8 stickers and gives away 6. How many are left?", "34"),
]


def verl_rows(items: list[tuple[str, str]], split: str = "train") -> list[dict[str, Any]]:
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": q + SUFFIX}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": gold},
            "extra_info": {"split": split, "index": i, "question": q},
        }
        for i, (q, gold) in enumerate(items)
    ]


def write_parquet(path: Any, rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class RolloutSpy:
    """Records every `RolloutRunner.collect` of a run: its tasks and their trajectories.

    A spy, not a fake: the real collect runs and its result is returned unchanged.
    """

    def __init__(self, monkeypatch: Any) -> None:
        self.train: list[Any] = []  # trajectories of sampled (training) collects
        self.eval: list[Any] = []  # trajectories of greedy (held-out eval) collects
        original = RolloutRunner.collect
        spy = self

        async def collect(self: Any, seeds_or_rows: Any, n: Any = None, **kw: Any) -> Any:
            groups = await original(self, seeds_or_rows, n, **kw)
            trajs = [t for g in groups for t in g.trajectories]
            (spy.eval if kw.get("sampling_cfg") is not None else spy.train).extend(trajs)
            return groups

        monkeypatch.setattr(RolloutRunner, "collect", collect)


def prompt_of(traj: Any) -> str:
    return next(m.content for m in traj.messages if m.role == "user")


def answer_of(traj: Any) -> str:
    return next(m.content for m in reversed(traj.messages) if m.role == "assistant")
