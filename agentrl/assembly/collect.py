"""Which `Collector` gathers a run's groups: the one reader of `trainer.async` outside
config validation (docs/wiring.md).

`trainer.async.max_staleness` >= 1 with a rollout this loop can schedule on (a local engine,
its child process, the Ray rollout actor) gets the `PipelinedCollector`; everything else, the
synchronous one. Sharded torchrun ranks have no producer and stay synchronous. A new way to
gather groups (a harness rollout, a remote producer) is a new class chosen here; the
`Trainer` does not change.
"""

from __future__ import annotations

from agentrl.algorithms import get_estimator
from agentrl.config import TrainConfig
from agentrl.trainer.collect import Collector, SyncCollector
from agentrl.trainer.components import Components
from agentrl.trainer.pipeline import PipelinedCollector


def pipelined(cfg: TrainConfig) -> bool:
    """Whether `cfg` asks for the pipelined loop (`trainer.async.max_staleness` >= 1)."""
    return cfg.trainer.async_.max_staleness >= 1


def build_collector(cfg: TrainConfig, c: Components) -> Collector:
    """The collector of a run on the roles `c` (the rollout, the scorer, the data)."""
    producer = c.rollout.producer if pipelined(cfg) else None
    if producer is not None:
        return PipelinedCollector(
            producer,
            c.data,
            cfg.rollout.n,
            cfg.data.batch_size,
            cfg.trainer.async_,
            concurrency=cfg.rollout.concurrency,
            engine_batch=cfg.engine.max_batch_size,
        )
    algo = cfg.algorithm
    return SyncCollector(
        c.rollout,
        c.scorer,
        c.data,
        cfg.rollout.n,
        cfg.data.batch_size,
        greedy_baseline=get_estimator(algo.adv_estimator).greedy_baseline,
        resample_batches=algo.max_resample_batches if algo.dynamic_sampling else 0,
    )
