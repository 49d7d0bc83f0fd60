"""Which engine a config builds: the one place that decides hf text / fast / vision, vllm, sglang.

Why one place: the choice used to be three knobs in two packages (`engine.kind`, a vision `if`
in the trainer's builder, and `engine.extra.fast` in an untyped dict that dropped fast-only
keys when it fell back). Now the typed `EngineConfig` goes in and `build_engine` decides:

- `kind: vllm | sglang` -> their adapters (`engine.extra` holds backend arguments);
- `kind: hf` with `vision=True` (`model.enable_vision`) -> `HFVisionEngine`;
- `kind: hf` -> `FastHFEngine` where `engine.hf.fast` resolves to true (true; or auto on CUDA
  for a supported architecture), else `HFEngine`.

Each hf engine takes its speed knobs as one object (`engine.hf.tuning`: `HFTuning` for every
hf engine, `FastHFTuning` for the fast path); which knobs are fast-only follows from those
classes, not from lists kept here. `config_problems` lists every `engine.*` key the engine
that will be built does not take; the config validation reports the first (`agentrl config show`, `doctor`, `train` before any model
loads). What only the model and device can tell (fast=auto on CPU or on an unsupported
architecture) is checked by `make_hf_engine` at build, with the same wording.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
from collections.abc import Callable, Sequence
from typing import Any

from agentrl.config.engine import MOVED_KEYS, EngineConfig, FastHFTuning, HFEngineConfig
from agentrl.engines.base import Engine, EngineError, SamplingParams

Builder = Callable[[EngineConfig, Any, Any], Engine]

# `engine.hf` keys (its speed knobs are `engine.hf.tuning.*`).
HF_OPTIONS = tuple(f.name for f in dataclasses.fields(HFEngineConfig))
TUNING_OPTIONS = tuple(f.name for f in dataclasses.fields(FastHFTuning))


def fast_only_changed(hf: HFEngineConfig) -> list[str]:
    """`engine.hf` keys only FastHFEngine takes that the config sets (dotted below `engine.hf`):
    its fast-only tuning knobs, and `max_seq_len`."""
    out = [f"tuning.{k}" for k in hf.tuning.fast_only_changed()]
    return out + (["max_seq_len"] if hf.max_seq_len != HFEngineConfig().max_seq_len else [])


def _changed_hf_keys(hf: HFEngineConfig) -> list[str]:
    """Every `engine.hf` key the config sets away from its default (tuning ones dotted)."""
    default = HFEngineConfig()
    plain = [
        f.name
        for f in dataclasses.fields(hf)
        if f.name != "tuning" and getattr(hf, f.name) != getattr(default, f.name)
    ]
    return plain + [f"tuning.{k}" for k in hf.tuning.changed()]


def config_problems(cfg: EngineConfig, *, vision: bool = False) -> list[str]:
    """Every `engine.*` key that the engine `cfg` builds does not take, as one line each."""
    if cfg.kind != "hf":
        out = [
            f"engine.hf.{k}: an option of engine.kind=hf; this config builds engine.kind={cfg.kind}"
            for k in _changed_hf_keys(cfg.hf)
        ]
        return out + _extra_problems(cfg)
    out = _extra_problems(cfg)
    if vision and cfg.hf.fast is True:
        out.append(
            "engine.hf.fast: true, but model.enable_vision builds HFVisionEngine (no fast path)"
        )
    why = "model.enable_vision builds HFVisionEngine" if vision else ""
    if not vision and cfg.hf.fast is False:
        why = "engine.hf.fast is false (HFEngine)"
    if why:
        out += [f"engine.hf.{k}: a fast-path option, but {why}" for k in fast_only_changed(cfg.hf)]
    hf = cfg.hf
    if hf.max_sessions is not None and hf.max_sessions < 1:
        out.append(f"engine.hf.max_sessions: {hf.max_sessions} is out of range (must be >= 1)")
    if hf.request_timeout_s is not None and not hf.request_timeout_s > 0:
        out.append(f"engine.hf.request_timeout_s: {hf.request_timeout_s} is out of range (> 0)")
    return out + hf.tuning.problems("engine.hf.tuning.")


def _extra_problems(cfg: EngineConfig) -> list[str]:
    if cfg.kind == "hf":
        return [_hf_extra_problem(k) for k in cfg.extra]
    accepted = EXTRA_KEYS[cfg.kind](cfg)
    if accepted is None:
        return []
    return [
        f"engine.extra.{k}: not an option of engine.kind={cfg.kind}"
        f"{_did_you_mean(k, accepted)}; it takes: {', '.join(sorted(accepted))}"
        for k in sorted(cfg.extra)
        if k not in accepted
    ]


def _hf_extra_problem(key: str) -> str:
    # The untyped spellings these options had before `engine.hf`: where each went now.
    if key in TUNING_OPTIONS or key in HF_OPTIONS:
        new = f"engine.hf.tuning.{key}" if key in TUNING_OPTIONS else f"engine.hf.{key}"
        return f"engine.extra.{key}: not an option of engine.kind=hf any more: write {new}"
    if f"engine.hf.{key}" in MOVED_KEYS:
        return (
            f"engine.extra.{key}: not an option of engine.kind=hf: {MOVED_KEYS['engine.hf.' + key]}"
        )
    known = (*HF_OPTIONS, *TUNING_OPTIONS)
    return (
        f"engine.extra.{key}: not an option of engine.kind=hf{_did_you_mean(key, known)}; "
        f"the hf engine's options are engine.hf.* ({', '.join(HF_OPTIONS)}) and its speed "
        f"knobs engine.hf.tuning.* ({', '.join(TUNING_OPTIONS)})"
    )


def _did_you_mean(value: str, known: Any) -> str:
    near = difflib.get_close_matches(value, sorted(known), n=3)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


def unknown_extra_keys(cfg: EngineConfig) -> tuple[list[str], list[str]]:
    """(`cfg.extra` keys the `cfg.kind` builder does not take, the keys it does take)."""
    accepted = EXTRA_KEYS[cfg.kind](cfg) if cfg.kind != "hf" else frozenset()
    if accepted is None:
        return [], []
    return sorted(k for k in cfg.extra if k not in accepted), sorted(accepted)


# ---------------------------------------------------------------------- building


def build_engine(
    cfg: EngineConfig,
    model: Any,
    tokenizer: Any,
    *,
    vision: bool = False,
    sampling: Sequence[SamplingParams] = (),
) -> Engine:
    """Build the engine `cfg` (an `EngineConfig`) names. `model` is a loaded transformers model
    (hf) or a checkpoint path / loaded model whose path external engines load; `vision` is
    `model.enable_vision`; `sampling`: how the run will sample (what `engine.hf.tuning.precapture`
    captures for). Raises `EngineError` naming any key the built engine does not take."""
    if cfg.kind not in BUILDERS:
        raise EngineError(f"unknown engine kind {cfg.kind!r}; known: {sorted(BUILDERS)}")
    if problems := config_problems(cfg, vision=vision):
        raise EngineError("; ".join(problems))
    if vision and cfg.kind == "hf":
        engine: Engine = _build_vision(cfg, model, tokenizer)
    else:
        engine = BUILDERS[cfg.kind](cfg, model, tokenizer)
    if cfg.sleep_between_phases and not engine.can_sleep:
        with contextlib.suppress(Exception):
            asyncio.run(engine.close())
        raise EngineError(
            f"engine.sleep_between_phases: {type(engine).__name__} cannot sleep here (e.g. vLLM "
            "without sleep mode); set it to false"
        )
    if cfg.kind == "hf" and cfg.hf.tuning.precapture:
        engine.precapture(sampling=sampling)  # every batch and key-length bucket
    return engine


def _hf_kwargs(cfg: EngineConfig) -> dict[str, Any]:
    """The keyword arguments every hf engine takes; null options keep the engine's default."""
    hf = cfg.hf
    kwargs: dict[str, Any] = {"max_batch_size": cfg.max_batch_size, "device": hf.device or None}
    optional = {
        "max_sessions": hf.max_sessions,
        "request_timeout_s": hf.request_timeout_s,
        "keep_kv_on_update": hf.keep_kv_on_update,
    }
    return kwargs | {k: v for k, v in optional.items() if v is not None}


def _load(model: Any) -> Any:
    if isinstance(model, str):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model)
    return model


def _build_hf(cfg: EngineConfig, model: Any, tokenizer: Any) -> Engine:
    kwargs = _hf_kwargs(cfg)
    if "max_seq_len" in fast_only_changed(cfg.hf):
        kwargs["max_seq_len"] = cfg.hf.max_seq_len
    return make_hf_engine(_load(model), tokenizer, fast=cfg.hf.fast, tuning=cfg.hf.tuning, **kwargs)


def _build_vision(cfg: EngineConfig, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.hf_vision import HFVisionEngine

    tuning = cfg.hf.tuning.core()
    return HFVisionEngine(_load(model), tokenizer, tuning=tuning, **_hf_kwargs(cfg))


def make_hf_engine(
    model: Any, tokenizer_or_eos_ids: Any, *, fast: bool | str = "auto", **kwargs: Any
) -> Engine:
    """The text hf engine for `model`: `FastHFEngine` where `fast` resolves to true, else
    `HFEngine`. `fast="auto"`: the fast path on CUDA for supported architectures; `True`: the
    fast path (also on CPU, eager; an unsupported architecture is an error); `False`: never.
    A fast-path option passed where `HFEngine` runs is an `EngineError` naming it."""
    import torch

    from agentrl.engines._static_model import unsupported_reason
    from agentrl.engines.hf import HFEngine
    from agentrl.engines.hf_fast import FastHFEngine

    device = torch.device(kwargs.get("device") or next(model.parameters()).device)
    reason = unsupported_reason(model)
    if fast is True and reason is not None:
        raise EngineError(
            f"engine.hf.fast: true, but the fast path does not support this model ({reason}); "
            "use fast: auto or false"
        )
    if fast is True or (fast == "auto" and device.type == "cuda" and reason is None):
        return FastHFEngine(model, tokenizer_or_eos_ids, **kwargs)
    tuning = kwargs.pop("tuning", None)
    unused = sorted({"max_seq_len", "prefill_graphs"} & set(kwargs))
    if isinstance(tuning, FastHFTuning):
        unused += [f"tuning.{k}" for k in tuning.fast_only_changed()]
        tuning = tuning.core()
    if unused:
        why = "fast is false" if fast is False else reason or f"fast=auto on {device.type}"
        raise EngineError(
            f"engine.hf.{unused[0]}: a fast-path option, but HFEngine runs ({why}); "
            f"drop {', '.join(unused)} or set engine.hf.fast: true"
        )
    return HFEngine(model, tokenizer_or_eos_ids, tuning=tuning, **kwargs)


def _build_vllm(cfg: EngineConfig, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.vllm import build_vllm

    return build_vllm(cfg, _checkpoint_path(model), tokenizer, dtype=_policy_dtype(model))


def _build_sglang(cfg: EngineConfig, model: Any, tokenizer: Any) -> Engine:
    from agentrl.engines.sglang import build_sglang

    return build_sglang(cfg, _checkpoint_path(model), tokenizer, dtype=_policy_dtype(model))


def _policy_dtype(model: Any) -> str | None:
    """The trainer's dtype for an external engine. vLLM's and SGLang's `dtype: auto`
    downcast a float32 checkpoint (bf16 on vLLM-CPU, fp16 on CUDA), so the rollout would
    sample from another policy than the trainer scores (seen: rollout KL 1e-5 per token on
    the quickstart). A loaded model says which dtype the trainer runs; a path leaves it to
    the engine; `engine.extra.dtype` wins either way."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return None
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def _checkpoint_path(model: Any) -> Any:
    """External engines load weights themselves: give them the model's directory."""
    return model if isinstance(model, str) else getattr(model, "name_or_path", model)


BUILDERS: dict[str, Builder] = {"hf": _build_hf, "vllm": _build_vllm, "sglang": _build_sglang}


def _vllm_extra_keys(cfg: EngineConfig) -> frozenset[str] | None:
    from agentrl.engines.vllm import extra_keys

    return extra_keys(cfg)


def _sglang_extra_keys(cfg: EngineConfig) -> frozenset[str] | None:
    from agentrl.engines.sglang import extra_keys

    return extra_keys(cfg)


# kind -> the `engine.extra` keys its builder takes (None: not knowable here, e.g. the
# backend that would list them is not installed; the builder then fails on a bad key itself).
EXTRA_KEYS: dict[str, Callable[[EngineConfig], frozenset[str] | None]] = {
    "vllm": _vllm_extra_keys,
    "sglang": _sglang_extra_keys,
}
