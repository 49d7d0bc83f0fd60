"""The wiring room: turns a `TrainConfig` into running parts, and nothing else does.

It is the one reader of the config's *choices*: the training backend, the engine (through
`agentrl.engines.build_engine`), where roles run (`trainer.placement`: this process, torchrun
ranks or Ray actors), and which roles exist (a Critic when the estimator's registry entry says
`needs_critic`, a Reference when a KL coefficient is set), and how each step's groups are
gathered (`trainer.async`: the synchronous or the pipelined `Collector`, `collect.py`). The
`Trainer` receives the result (`Components` and the collector) and only composes it. See
docs/wiring.md.

    trainer = build_trainer(cfg)        # validate, assemble, hand over
    trainer.train()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.config import TrainConfig
    from agentrl.trainer import Trainer

    from .build import build_components, env_factory, seed_everything
    from .collect import build_collector
    from .placement import PLACEMENTS, place


def build_trainer(cfg: TrainConfig) -> Trainer:
    """Validate `cfg`, build every role where `trainer.placement` says, and hand them to a
    `Trainer`. The config is checked first, so a bad key fails before any model loads; if the
    Trainer cannot be made, the built roles are closed again."""
    from agentrl.algorithms import KLController
    from agentrl.assembly.validate import validate
    from agentrl.trainer import Trainer

    from .collect import build_collector
    from .placement import place

    validate(cfg)  # one line naming a bad key
    kl_ctrl = KLController.from_config(cfg.algorithm.kl)  # a bad controller fails here too
    components = place(cfg)
    try:
        return Trainer(cfg, components, build_collector(cfg, components), kl_ctrl=kl_ctrl)
    except BaseException:
        components.close()
        raise


__all__ = [
    "PLACEMENTS",
    "build_collector",
    "build_components",
    "build_trainer",
    "env_factory",
    "place",
    "seed_everything",
]


# The builders import torch and the trainer; `agentrl.assembly.validate` (what `agentrl config
# show` and the other light commands need) must not pay for them, so they load on first use.
_LAZY = {
    "PLACEMENTS": "placement",
    "place": "placement",
    "build_collector": "collect",
    "build_components": "build",
    "env_factory": "build",
    "seed_everything": "build",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
