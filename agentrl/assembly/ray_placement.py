"""`trainer.placement=ray`: the learner and the rollout run as Ray actors.

The driver (the `agentrl train` process) keeps the loop, the data cursor, reward scoring and
checkpoints; the learner actor holds the actor (+ reference and critic, colocated) and the
rollout actor holds the engine and env pool. Both are scheduled in one placement group:

* colocated (`trainer.colocate=true`, default): one bundle; the two actors share its CPUs and
  GPU (half a GPU each), taking turns as the loop alternates generation and training.
* split (`trainer.colocate=false`): one bundle per actor, packed on one node or spread over
  `trainer.nnodes` nodes, so generation and training get their own devices.

`ray.init()` joins a running cluster (`ray start --head` / `RAY_ADDRESS`) or starts a local
one. Weights travel through the object store on CPU; a GPU-to-GPU (NCCL) weight broadcast and
multi-GPU learner groups arrive with the multi-GPU work (docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrl.config import TrainConfig

from .placement import Placement

if TYPE_CHECKING:
    from agentrl.trainer.components import Components

CPUS_PER_WORKER = 1


@dataclass
class Layout:
    """The placement group and where each worker goes in it."""

    bundles: list[dict[str, float]]
    strategy: str
    learner_bundle: int
    rollout_bundle: int
    gpus_per_worker: float

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> Layout:
        t = cfg.trainer
        gpu = 1.0 if t.n_gpus_per_node > 0 else 0.0
        if t.colocate:
            bundle = {"CPU": 2.0 * CPUS_PER_WORKER} | ({"GPU": gpu} if gpu else {})
            return cls([bundle], "PACK", 0, 0, gpu / 2)
        bundle = {"CPU": float(CPUS_PER_WORKER)} | ({"GPU": gpu} if gpu else {})
        strategy = "SPREAD" if t.nnodes > 1 else "PACK"
        return cls([dict(bundle), dict(bundle)], strategy, 0, 1, gpu)


class RayPlacement(Placement):
    @classmethod
    def build(cls, cfg: TrainConfig) -> Components:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        from agentrl.backends import TorchBackend
        from agentrl.chat import ChatFormat
        from agentrl.models.load import load_tokenizer
        from agentrl.trainer.components import Components
        from agentrl.trainer.data import TaskSource
        from agentrl.trainer.roles import RewardScorer
        from agentrl.workers.ray_proxies import RayActor, RayCritic, RayReference, RayRollout

        from .build import env_factory, seed_everything

        started = time.time()
        data = TaskSource(cfg.data, cfg.trainer.seed)  # a bad dataset row fails before Ray
        owns_ray = not ray.is_initialized()
        if owns_ray:
            ray.init(log_to_driver=True)
        layout = Layout.from_config(cfg)
        pg = placement_group(layout.bundles, strategy=layout.strategy)
        workers: dict[str, Any] = {}

        def teardown() -> None:  # the rollout worker closes with its proxy (`RayRollout.close`)
            if "learner" in workers:
                ray.get(workers["learner"].close.remote())
                ray.kill(workers["learner"])
            remove_placement_group(pg)
            if owns_ray:
                ray.shutdown()

        try:  # a failure while building releases what was reserved so far
            _wait_ready(ray, pg, layout)
            gpus = layout.gpus_per_worker
            learner = workers["learner"] = _spawn(
                ray, "LearnerWorker", cfg, pg, layout.learner_bundle, gpus
            )
            rollout = workers["rollout"] = _spawn(
                ray, "RolloutWorker", cfg, pg, layout.rollout_bundle, gpus
            )
            has_ref, has_critic = ray.get(learner.roles.remote())
            success_at = ray.get(rollout.threshold.remote())
            seed_everything(cfg.trainer.seed)
            tokenizer = load_tokenizer(cfg.model)
            chat = ChatFormat(tokenizer, cfg.rollout.tool_format)
        except BaseException:
            if "rollout" in workers:
                ray.kill(workers["rollout"])
            with contextlib.suppress(Exception):
                teardown()
            raise

        return Components(
            backend=TorchBackend("cpu"),  # the driver is rank 0 of nothing: it only logs/saves
            tokenizer=tokenizer,
            actor=RayActor(learner),
            reference=RayReference(learner) if has_ref else None,
            critic=RayCritic(learner) if has_critic else None,
            rollout=RayRollout(rollout, chat),
            scorer=RewardScorer(cfg.algorithm, cfg.rollout, tokenizer.pad_token_id),
            data=data,
            success_at=success_at,
            make_env=env_factory(cfg),
            started_at=started,
            cleanup=[teardown],
        )


def _wait_ready(ray: Any, pg: Any, layout: Layout, timeout_s: float = 120.0) -> None:
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as e:
        raise RuntimeError(
            f"Ray could not reserve {layout.bundles} ({layout.strategy}) in {timeout_s:.0f}s; "
            f"cluster has {ray.cluster_resources()}. Lower trainer.n_gpus_per_node, set "
            "trainer.colocate=true, or add nodes (ray start --address=...)."
        ) from e


def _spawn(ray: Any, name: str, cfg: TrainConfig, pg: Any, bundle: int, gpus: float) -> Any:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from . import ray_workers

    cls = ray.remote(getattr(ray_workers, name))
    strategy = PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=bundle
    )
    return cls.options(
        num_cpus=CPUS_PER_WORKER, num_gpus=gpus, scheduling_strategy=strategy, name=None
    ).remote(cfg, CPUS_PER_WORKER)
