"""Which `Collector` gathers a run's groups: the one reader of `trainer.async` outside
config validation (docs/wiring.md).

`rollout.harness.agent` / `.command` gets the `HarnessCollector` (an agent program run
against an in-process gateway on the local engine); `trainer.async.max_staleness` >= 1 with
a rollout this loop can schedule on (a local engine, its child process, the Ray rollout
actor) gets the `PipelinedCollector`, paced by the `trainer.async.staleness` policy
(`agentrl.trainer.staleness`); everything else, the synchronous one. Sharded torchrun ranks
have no producer and stay synchronous. A new way to gather groups (a remote producer)
is a new class chosen here; the `Trainer` does not change.
"""

from __future__ import annotations

from agentrl.algorithms import get_estimator
from agentrl.config import ConfigError, TrainConfig
from agentrl.rollout.role import Rollout
from agentrl.trainer.collect import Collector, SyncCollector
from agentrl.trainer.components import Components
from agentrl.trainer.harness import HarnessCollector
from agentrl.trainer.pipeline import PipelinedCollector
from agentrl.trainer.staleness import POLICIES, StalenessPolicy


def pipelined(cfg: TrainConfig) -> bool:
    """Whether `cfg` asks for the pipelined loop (`trainer.async.max_staleness` >= 1)."""
    return cfg.trainer.async_.max_staleness >= 1


def staleness_policy(cfg: TrainConfig) -> StalenessPolicy:
    """The pipelined collector's `trainer.async.staleness` policy."""
    a = cfg.trainer.async_
    return POLICIES[a.staleness](a.max_staleness, cfg.data.batch_size)


def build_collector(cfg: TrainConfig, c: Components) -> Collector:
    """The collector of a run on the roles `c` (the rollout, the scorer, the data)."""
    if cfg.rollout.harness.enabled:
        return harness_collector(cfg, c)
    producer = c.rollout.producer if pipelined(cfg) else None
    if producer is not None:
        return PipelinedCollector(
            producer,
            c.data,
            cfg.rollout.n,
            cfg.data.batch_size,
            cfg.trainer.async_,
            staleness_policy(cfg),
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


def harness_collector(cfg: TrainConfig, c: Components) -> HarnessCollector:
    """The harness rollout's collector (what it cannot combine with is refused when the
    config loads: `assembly.validate.check_harness`)."""
    if not isinstance(c.rollout, Rollout):
        raise ConfigError(
            "rollout.harness needs the engine in this process (trainer.placement: local, "
            "trainer.async.producer: thread, one rank)"
        )
    return HarnessCollector(
        c.rollout,
        c.scorer,
        c.data,
        cfg.rollout.harness,
        cfg.sampling,
        c.make_env,
        n=cfg.rollout.n,
        batch_size=cfg.data.batch_size,
        concurrency=cfg.rollout.concurrency,
        group_relative=get_estimator(cfg.algorithm.adv_estimator).group_relative,
        tokenizer_name=cfg.model.tokenizer or cfg.model.path,
    )
