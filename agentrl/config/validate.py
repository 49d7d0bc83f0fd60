"""The checks a `TrainConfig` can make on its own: numeric ranges (and the `tuning` sections'
own bounds), run by `load_config` on every load.

Why here: the loader only knows types, so `trainer.steps=-1` used to pass `config show` and
fail after a model load, an SFT and a rollout. Each check raises one `ConfigError` naming the
key and its value. `RANGES` is the single table of numeric bounds outside the tuning sections
(which carry theirs, `agentrl.config.engine`); tests/core/test_config_validate.py checks that
every numeric field of the config tree has one. Checks that need a registry (env ids,
estimators, engine options, model presets) are the wiring room's:
`agentrl.assembly.validate`, which runs these first.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .engine import HFTuning
from .loader import ConfigError, yaml_name
from .schema import TrainConfig


@dataclass(frozen=True)
class Range:
    """Inclusive bounds unless `open_lo` / `open_hi`; None = unbounded on that side."""

    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False
    # Extra allowed values outside the range (e.g. 0 = "off").
    also: tuple[float, ...] = ()

    def contains(self, v: float) -> bool:
        if v in self.also:
            return True
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.lo is not None and (v < self.lo or (self.open_lo and v == self.lo)):
            return False
        return not (self.hi is not None and (v > self.hi or (self.open_hi and v == self.hi)))

    def __str__(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.open_lo else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.open_hi else '<='} {self.hi:g}")
        text = " and ".join(parts) or "finite"
        return text + "".join(f", or {a:g}" for a in self.also)


NONNEG = Range(0)
POS = Range(0, open_lo=True)
AT_LEAST_1 = Range(1)
UNIT = Range(0, 1)

# Dotted key -> allowed values. Every int/float field of TrainConfig has an entry.
RANGES: dict[str, Range] = {
    # verl-parity algorithm knobs (docs/algorithms.md)
    "algorithm.kl.target_kl": POS,
    "algorithm.kl.horizon": AT_LEAST_1,
    "algorithm.loss_scale_factor": NONNEG,  # 0: the batch's response width
    "algorithm.tau_pos": POS,
    "algorithm.tau_neg": POS,
    "algorithm.clip_cov_ratio": UNIT,
    "algorithm.clip_cov_lb": Range(),  # covariance bounds: any finite value
    "algorithm.clip_cov_ub": Range(),
    "algorithm.kl_cov_ratio": UNIT,
    "algorithm.ppo_kl_coef": NONNEG,
    "model.lora.r": AT_LEAST_1,
    "model.lora.alpha": POS,
    "model.lora.dropout": Range(0, 1, open_hi=True),
    "engine.max_batch_size": AT_LEAST_1,
    "engine.gpu_memory_utilization": Range(0, 1, open_lo=True),
    "engine.hf.max_seq_len": AT_LEAST_1,
    "sampling.temperature": NONNEG,
    "sampling.top_p": Range(0, 1, open_lo=True),
    "sampling.top_k": NONNEG,
    "sampling.max_new_tokens": AT_LEAST_1,
    "rollout.n": AT_LEAST_1,
    "rollout.max_turns": AT_LEAST_1,
    "rollout.max_total_tokens": AT_LEAST_1,
    "rollout.episode_timeout_s": POS,
    "rollout.episode_wall_factor": AT_LEAST_1,
    "rollout.concurrency": AT_LEAST_1,
    "rollout.max_invalid_tool_calls": AT_LEAST_1,
    "rollout.harness.timeout_s": POS,
    "rollout.harness.sandbox_disk_mb": AT_LEAST_1,
    "data.batch_size": AT_LEAST_1,
    "data.eval_seed_offset": NONNEG,
    "data.eval_episodes": NONNEG,
    "algorithm.clip_low": NONNEG,
    "algorithm.clip_high": NONNEG,
    "algorithm.dual_clip_c": Range(1, open_lo=True, also=(0.0,)),
    "algorithm.entropy_coef": NONNEG,
    "algorithm.gamma": UNIT,
    "algorithm.lam": UNIT,
    "algorithm.kl.coef": NONNEG,
    "algorithm.value_clip": NONNEG,
    "algorithm.max_resample_batches": NONNEG,
    "algorithm.overlong_buffer": NONNEG,
    "algorithm.overlong_penalty": NONNEG,
    "algorithm.tis_cap": POS,
    "algorithm.behav_weight_cap": Range(1, open_lo=True, also=(0.0,)),  # 0: no cap
    "algorithm.rollout_mask_low": Range(0, 1, open_hi=True),  # 0: 1/high
    "algorithm.rollout_mask_high": Range(1, open_lo=True),
    "optim.lr": POS,
    "optim.weight_decay": NONNEG,
    "optim.betas": Range(0, 1, open_hi=True),
    "optim.warmup_steps": NONNEG,
    "optim.grad_clip": NONNEG,
    "sft.steps": NONNEG,
    "sft.batch_size": AT_LEAST_1,
    "sft.lr": POS,
    "sft.demos": AT_LEAST_1,
    "sft.skip_tools": UNIT,
    "trainer.steps": NONNEG,
    "trainer.ppo_epochs": AT_LEAST_1,
    "trainer.mini_batch_size": AT_LEAST_1,
    "trainer.micro_batch_size": AT_LEAST_1,
    "trainer.logprob_micro_batch_size": AT_LEAST_1,
    "trainer.ulysses_sp": AT_LEAST_1,
    "trainer.nnodes": AT_LEAST_1,
    "trainer.n_gpus_per_node": NONNEG,
    "trainer.seed": NONNEG,
    "trainer.save_every": NONNEG,
    "trainer.eval_every": NONNEG,
    "trainer.dump_rollouts_every": NONNEG,
    "trainer.cpu_threads": NONNEG,
    "trainer.gc_every": NONNEG,
    "trainer.max_wall_s": NONNEG,
    "trainer.async.max_staleness": NONNEG,
    "trainer.async.prefetch_batches": NONNEG,
    "trainer.async.batch_timeout_s": POS,
    "trainer.async.producer_timeout_s": POS,
}


def numeric_fields(cfg: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every int/float leaf (tuples of numbers too) of a config tree,
    outside the `tuning` sections (they check their own bounds: `tuning_problems`)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{yaml_name(f)}"
        if isinstance(value, HFTuning):
            continue
        if dataclasses.is_dataclass(value):
            yield from numeric_fields(value, key + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value
        elif isinstance(value, (tuple, list)) and value and all(_is_num(v) for v in value):
            yield key, value


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def did_you_mean(value: str, known: Iterable[str]) -> str:
    near = difflib.get_close_matches(value, list(known), n=3)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


def unknown_name(key: str, value: str, known: Iterable[str], what: str, src: str) -> ConfigError:
    known = sorted(known)
    hint = did_you_mean(value, known)
    listing = "" if hint else f"; known: {', '.join(known[:12])}{' ...' if len(known) > 12 else ''}"
    return ConfigError(f"{src}: {key}: unknown {what} {value!r}{hint}{listing}")


def check_ranges(cfg: TrainConfig, src: str) -> None:
    for key, value in numeric_fields(cfg):
        rng = RANGES.get(key)
        if rng is None:
            continue
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if not rng.contains(v):
                raise ConfigError(f"{src}: {key}: {value!r} is out of range (must be {rng})")
    for problem in cfg.engine.hf.tuning.problems("engine.hf.tuning."):
        raise ConfigError(f"{src}: {problem}")


def validate(cfg: TrainConfig, src: str = "<config>") -> None:
    """Raise `ConfigError` for the first value of `cfg` out of its range. The checks that
    need registries are `agentrl.assembly.validate.validate`'s."""
    check_ranges(cfg, src)
