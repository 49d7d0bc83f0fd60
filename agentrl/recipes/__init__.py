"""Recipes built on the trainer's roles but with their own loop: self-play fine-tuning.

- `spin`: SPIN, demonstrations vs the previous iterate's own samples (`spin_loss`).
- `sppo`: SPPO, K samples per prompt, win probabilities from env rewards (`sppo_loss`).

Run one with `agentrl selfplay --config configs/selfplay/spin-cpu.yaml`; the config is a
`TrainConfig` plus a `selfplay:` section (`SelfPlayTrainConfig`).
"""

from agentrl.recipes.config import SelfPlayConfig, SelfPlayTrainConfig

__all__ = ["RECIPES", "SelfPlayConfig", "SelfPlayTrainConfig", "run_selfplay"]

RECIPES = {"spin": "agentrl.recipes.spin:SPIN", "sppo": "agentrl.recipes.sppo:SPPO"}


def run_selfplay(cfg: SelfPlayTrainConfig) -> dict[str, float]:
    """Build the recipe `cfg.selfplay.method` names and run all its iterations."""
    import importlib

    module, name = RECIPES[cfg.selfplay.method].split(":")
    recipe = getattr(importlib.import_module(module), name)(cfg)
    return recipe.run()
