"""Checks a loaded `TrainConfig` must pass before anything heavy starts: numeric ranges and
every string that names a registry entry (env id, estimator, loss, engine extras, ...).

Why here: the loader only knows types, so `trainer.steps=-1` or `adv_estimator=grop` used to
pass `config show` and fail (or worse, run) after a model load, an SFT and a rollout. Each
check raises one `ConfigError` naming the key, its value and, for names, the closest known
ones. `RANGES` is the single table of numeric bounds; tests/core/test_config_validate.py
checks that every numeric field of the config tree has an entry.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .loader import ConfigError, yaml_name


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
    "engine.hf.max_prefill_tokens": AT_LEAST_1,
    "engine.hf.admission_window_s": NONNEG,
    "engine.hf.join_every": AT_LEAST_1,
    "engine.hf.max_seq_len": AT_LEAST_1,
    "engine.hf.batch_buckets": AT_LEAST_1,
    "engine.hf.decode_chunk": AT_LEAST_1,
    "sampling.temperature": NONNEG,
    "sampling.top_p": Range(0, 1, open_lo=True),
    "sampling.top_k": NONNEG,
    "sampling.max_new_tokens": AT_LEAST_1,
    "rollout.n": AT_LEAST_1,
    "rollout.max_turns": AT_LEAST_1,
    "rollout.max_total_tokens": AT_LEAST_1,
    "rollout.episode_timeout_s": POS,
    "rollout.concurrency": AT_LEAST_1,
    "rollout.max_invalid_tool_calls": AT_LEAST_1,
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
    "trainer.async.max_staleness": NONNEG,
    "trainer.async.prefetch_batches": NONNEG,
    "trainer.async.batch_timeout_s": POS,
    "trainer.async.producer_timeout_s": POS,
}


def numeric_fields(cfg: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every int/float leaf (tuples of numbers too) of a config tree."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{yaml_name(f)}"
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


def check_ranges(cfg: Any, src: str) -> None:
    for key, value in numeric_fields(cfg):
        rng = RANGES.get(key)
        if rng is None:
            continue
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if not rng.contains(v):
                raise ConfigError(f"{src}: {key}: {value!r} is out of range (must be {rng})")


def check_algorithm(cfg: Any, src: str) -> None:
    from agentrl.algorithms import ADV_ESTIMATORS, POLICY_LOSSES

    algo = cfg.algorithm
    if algo.adv_estimator not in ADV_ESTIMATORS:
        raise unknown_name(
            "algorithm.adv_estimator", algo.adv_estimator, ADV_ESTIMATORS, "estimator", src
        )
    if algo.policy_loss not in POLICY_LOSSES:
        raise unknown_name(
            "algorithm.policy_loss", algo.policy_loss, POLICY_LOSSES, "policy loss", src
        )


def check_group_size(cfg: Any, src: str) -> None:
    """A group-relative estimator (grpo, rloo, ...) with `rollout.n: 1` has a baseline equal
    to the sample itself: refused here, not after the SFT bootstrap and the first eval."""
    from agentrl.algorithms import get_estimator

    if cfg.rollout.n >= 2 or not get_estimator(cfg.algorithm.adv_estimator).group_relative:
        return
    raise ConfigError(
        f"{src}: rollout.n: {cfg.rollout.n} with algorithm.adv_estimator: "
        f"{cfg.algorithm.adv_estimator}, which is group-relative and needs rollout.n >= 2 "
        f"(samples per prompt); use rollout.n >= 2 or a non-group estimator such as "
        f"reinforce_plus_plus or gae"
    )


def check_env(cfg: Any, src: str) -> None:
    """`data.env` is registered (after importing `data.env_modules`), its `env_kwargs` fit its
    constructor, and an SFT bootstrap has an oracle to imitate."""
    from agentrl.envs import AgentEnv, load_env_module, registry
    from agentrl.envs.registration import load_plugins

    for path in cfg.data.env_modules:
        try:
            load_env_module(path)
        except FileNotFoundError as e:
            raise ConfigError(f"{src}: data.env_modules: {e}") from None
    load_plugins()
    env_id = cfg.data.env
    from agentrl.envs.interop import resolve

    try:
        foreign = resolve(env_id)  # `textarena:NAME`, `skyrl:...`: other stacks' envs
    except KeyError as e:
        raise ConfigError(f"{src}: data.env: {e.args[0]}") from None
    if foreign is not None:
        return  # built (and its arguments checked) by its own package when the env is made
    if env_id not in registry:
        hint = did_you_mean(env_id, registry) or " (no close match)"
        raise ConfigError(
            f"{src}: data.env: unknown env id {env_id!r}{hint}; `agentrl envs list` shows all "
            f"{len(registry)}, `--env-module FILE` loads your own"
        )
    spec = registry[env_id]
    target = spec.load()
    _check_kwargs(target, cfg.data.env_kwargs, src)
    if cfg.sft.steps > 0 and isinstance(target, type) and issubclass(target, AgentEnv):
        if target.oracle_action is AgentEnv.oracle_action:
            raise ConfigError(
                f"{src}: sft.steps={cfg.sft.steps}: the SFT bootstrap imitates the env's oracle "
                f"and {env_id} has none (no oracle_action); set sft.steps=0 to train with RL only"
            )


def _check_kwargs(target: Any, kwargs: dict[str, Any], src: str) -> None:
    if not kwargs:
        return
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return  # a builtin or C callable: its own error will name the key
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for k in kwargs:
        if k not in names:
            raise unknown_name(f"data.env_kwargs.{k}", k, names, "env argument", src)


def check_engine(cfg: Any, src: str) -> None:
    """`engine.*` keys that the engine this config builds does not take (the rules live with
    the builder, `agentrl.engines.build.config_problems`, which `build_engine` applies too)."""
    from agentrl.engines.build import config_problems

    for problem in config_problems(cfg.engine, vision=cfg.model.enable_vision):
        raise ConfigError(f"{src}: {problem}")


def check_model(cfg: Any, src: str) -> None:
    from agentrl.models.tiny import PRESETS

    for key in ("model.path", "model.tokenizer"):
        path = cfg.model.path if key == "model.path" else cfg.model.tokenizer
        if path and path.startswith("tiny:") and path[5:] not in PRESETS:
            raise unknown_name(key, path, [f"tiny:{p}" for p in PRESETS], "tiny preset", src)


def check_model_files(cfg: Any, src: str) -> None:
    """`model.path` / `model.tokenizer` that can only be local files exist on this machine.
    Asked for by the commands that load the model (`load_config(local_files=True)`), not by
    every load: a shipped template keeps its `/path/to/...` placeholder."""
    for key in ("model.path", "model.tokenizer"):
        path = cfg.model.path if key == "model.path" else cfg.model.tokenizer
        if path:
            missing_model_file(key, path, src)


def missing_model_file(key: str, path: str, src: str) -> None:
    """ConfigError if `path` (the value of `key`) is meant as a local file and is not there."""
    if looks_local(path) and not Path(path).expanduser().exists():
        raise ConfigError(
            f"{src}: {key}: {path!r}: no such file or directory (expected a checkpoint "
            f"folder, a .gguf file, tiny:<preset> or a hub id owner/name)"
        )


def looks_local(path: str) -> bool:
    """Whether `model.path` can only mean a file or folder on this machine (absolute, ./, ../,
    ~, a .gguf file, or nested deeper than a hub id's owner/name), so a typo in it is a
    config error, not a long loader traceback. Presets and `owner/name` ids are left alone."""
    from agentrl.models.gguf import PRESETS as GGUF_PRESETS

    if "://" in path or path.startswith(("tiny:", "tiny-vlm:")) or path in GGUF_PRESETS:
        return False
    if os.path.isabs(path) or path.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    if path in (".", "..") or path.lower().endswith(".gguf"):
        return True
    return path.count("/") >= 2 or (os.sep != "/" and os.sep in path)


def check_device(cfg: Any, src: str) -> None:
    import torch

    device = cfg.trainer.device
    if device == "auto":
        return
    try:  # whether this machine has that device is for the run to find, not the config
        torch.device(device)
    except RuntimeError:
        raise ConfigError(
            f"{src}: trainer.device: {device!r} is not a device (auto, cpu, cuda, cuda:N)"
        ) from None


def check_async(cfg: Any, src: str) -> None:
    """`trainer.async.max_staleness` >= 1 (docs/async.md): what the pipeline cannot combine
    with yet, named."""
    from agentrl.algorithms import get_estimator

    if cfg.trainer.async_.producer == "process":
        alone = {
            "trainer.placement: ray": cfg.trainer.placement == "ray",
            f"trainer.backend: {cfg.trainer.backend} (one trainer process only)": (
                cfg.trainer.backend != "torch"
            ),
            "engine.kind other than hf": cfg.engine.kind != "hf",
        }
        for what, clash in alone.items():
            if clash:
                raise ConfigError(
                    f"{src}: trainer.async.producer: process does not combine with {what}"
                )
    if cfg.trainer.async_.max_staleness < 1:
        return
    key = "trainer.async.max_staleness"
    clashes = {
        "algorithm.dynamic_sampling": cfg.algorithm.dynamic_sampling,
        f"algorithm.adv_estimator: {cfg.algorithm.adv_estimator} (greedy baseline episodes)": (
            get_estimator(cfg.algorithm.adv_estimator).greedy_baseline
        ),
        "engine.sleep_between_phases (the engine decodes while the update runs)": (
            cfg.engine.sleep_between_phases
        ),
        "trainer.param_offload / optimizer_offload (rollouts overlap the update)": (
            cfg.trainer.param_offload or cfg.trainer.optimizer_offload
        ),
        # Per-token weight versions: the hf engines and vLLM (in-process or server) stamp them.
        "engine.kind other than hf or vllm (per-token weight versions)": (
            cfg.engine.kind not in ("hf", "vllm")
        ),
    }
    for what, clash in clashes.items():
        if clash:
            raise ConfigError(f"{src}: {key}: >= 1 does not combine with {what}")


def validate(cfg: Any, src: str = "<config>", *, local_files: bool = False) -> None:
    """Raise `ConfigError` for the first bad value of `cfg` (a `TrainConfig`); with
    `local_files`, also for a local model path that does not exist (`check_model_files`)."""
    check_ranges(cfg, src)
    check_algorithm(cfg, src)
    check_group_size(cfg, src)
    check_model(cfg, src)
    if local_files:
        check_model_files(cfg, src)
    check_engine(cfg, src)
    check_device(cfg, src)
    check_env(cfg, src)
    check_async(cfg, src)
