"""The KL coefficient over training (`algorithm.kl.ctrl`): fixed, or adaptive to a target.

Why adaptive: a fixed β that keeps the policy near the reference early on either strangles
learning later or lets it drift when rewards get easy. Ziegler et al. (2019, "Fine-Tuning
Language Models from Human Preferences", §2.2) steer β towards a target KL with a clipped
proportional controller, after each batch of n samples:

    e = clip(KL / KL_target − 1, −0.2, 0.2),   β ← β·(1 + e·n / horizon)

KL is the batch's measured KL to the reference: the mean over sequences of each sequence's
mean per-token estimate (`kl.estimator`), as verl's `apply_kl_penalty` measures it. The
controller is state the trainer checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.config.schema import KLConfig

ERROR_CLIP = 0.2


@dataclass
class KLController:
    """β and how it moves; `update` is a no-op for `ctrl: fixed`."""

    value: float
    adaptive: bool = False
    target: float = 0.1
    horizon: int = 10000

    @classmethod
    def from_config(cls, cfg: KLConfig) -> KLController:
        if cfg.ctrl == "fixed":
            return cls(cfg.coef)
        if cfg.ctrl != "adaptive":
            raise ValueError(f"algorithm.kl.ctrl must be fixed or adaptive, got {cfg.ctrl!r}")
        if cfg.horizon <= 0:
            raise ValueError(f"algorithm.kl.horizon must be > 0, got {cfg.horizon}")
        if cfg.target_kl <= 0:
            raise ValueError(f"algorithm.kl.target_kl must be > 0, got {cfg.target_kl}")
        if cfg.coef <= 0:
            raise ValueError(
                "algorithm.kl.ctrl=adaptive scales algorithm.kl.coef multiplicatively; "
                f"it needs a starting coef > 0, got {cfg.coef}"
            )
        return cls(cfg.coef, adaptive=True, target=cfg.target_kl, horizon=cfg.horizon)

    def update(self, current_kl: float, n_steps: int) -> float:
        """Move β after a batch of `n_steps` samples whose measured KL was `current_kl`."""
        if self.adaptive:
            error = min(max(current_kl / self.target - 1.0, -ERROR_CLIP), ERROR_CLIP)
            self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
