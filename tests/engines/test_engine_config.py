"""One typed `EngineConfig` decides the engine: `build_engine` builds text / fast / vision /
vllm / sglang from it, and every `engine.*` key that the engine being built does not take is
one error naming the key (at config load where the config alone tells, else at build)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrl.config import ConfigError, EngineConfig, HFEngineConfig, TrainConfig, load_config
from agentrl.engines import EngineError, HFEngine, build_engine, config_problems


def _load(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, list(overrides))


def test_typed_hf_options_load_and_show() -> None:
    cfg = _load("engine.hf.fast=true", "engine.hf.max_seq_len=512", "engine.hf.decode_chunk=4")
    assert cfg.engine.hf.fast is True and cfg.engine.hf.max_seq_len == 512
    assert _load("engine.hf.fast=auto").engine.hf.fast == "auto"
    with pytest.raises(ConfigError, match=r"engine.hf.fast: 'sometimes' is not"):
        _load("engine.hf.fast=sometimes")
    with pytest.raises(ConfigError, match=r"engine.hf.decode_chunk: 0 is out of range"):
        _load("engine.hf.decode_chunk=0")
    with pytest.raises(ConfigError, match=r"engine.hf.max_sessions: 0 is out of range"):
        _load("engine.hf.max_sessions=0")
    with pytest.raises(ConfigError, match=r"engine.hf.join_every: 0 is out of range"):
        _load("engine.hf.join_every=0")


@pytest.mark.parametrize("fast", [True, False])
def test_join_every_reaches_both_text_engines(tiny: Any, fast: bool) -> None:
    model, tok = tiny
    cfg = _load(f"engine.hf.fast={str(fast).lower()}", "engine.hf.join_every=4")
    engine = build_engine(cfg.engine, model, tok)
    assert engine.join_every == 4
    asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.hf.fast=false", "engine.hf.max_seq_len=512"],
         r"engine.hf.max_seq_len: a fast-path option, but engine.hf.fast is false"),
        (["model.enable_vision=true", "engine.hf.compile_decode=true"],
         r"engine.hf.compile_decode: a fast-path option, but model.enable_vision builds "
         r"HFVisionEngine"),
        (["model.enable_vision=true", "engine.hf.fast=true"],
         r"engine.hf.fast: true, but model.enable_vision builds HFVisionEngine"),
        (["engine.kind=vllm", "model.path=/m", "engine.hf.admission_window_s=0"],
         r"engine.hf.admission_window_s: an option of engine.kind=hf; this config builds "
         r"engine.kind=vllm"),
        (["engine.extra.max_seq_len=512"],
         r"engine.extra.max_seq_len: not an option of engine.kind=hf any more: write "
         r"engine.hf.max_seq_len"),
        (["engine.extra.fsat=true"],
         r"engine.extra.fsat: not an option of engine.kind=hf \(did you mean 'fast'\?\)"),
    ],
)  # fmt: skip
def test_a_key_the_built_engine_does_not_take_is_named(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(*overrides)


def test_defaults_and_fast_auto_pass_the_static_check() -> None:
    assert config_problems(EngineConfig()) == []
    assert config_problems(EngineConfig(hf=HFEngineConfig(max_seq_len=512))) == []  # auto
    assert config_problems(EngineConfig(), vision=True) == []


def test_fast_only_option_where_auto_resolves_to_hf_engine_fails_at_build(tiny: Any) -> None:
    """On CPU `fast: auto` builds HFEngine: a fast-path option is then an error, not dropped."""
    model, tok = tiny
    cfg = EngineConfig(hf=HFEngineConfig(max_seq_len=512, share_prefill=False))
    with pytest.raises(EngineError, match=r"engine.hf.max_seq_len: a fast-path option, but "
                       r"HFEngine runs \(fast=auto on cpu\)"):  # fmt: skip
        build_engine(cfg, model, tok)
    engine = build_engine(EngineConfig(hf=HFEngineConfig(max_prefill_tokens=64)), model, tok)
    assert type(engine) is HFEngine and engine.max_prefill_tokens == 64


def test_build_engine_refuses_what_validation_refuses(tiny: Any) -> None:
    model, tok = tiny
    cfg = EngineConfig(hf=HFEngineConfig(fast=False, decode_chunk=2))
    with pytest.raises(EngineError, match="engine.hf.decode_chunk: a fast-path option"):
        build_engine(cfg, model, tok)


def test_capabilities_are_declared_not_probed(tiny: Any) -> None:
    from agentrl.engines.base import Engine
    from agentrl.engines.hf_fast import FastHFEngine
    from agentrl.engines.hf_vision import HFVisionEngine
    from agentrl.engines.sglang import SGLangEngine

    assert Engine.multimodal_inputs == "none" and Engine.can_sleep is False
    assert HFEngine.multimodal_inputs == FastHFEngine.multimodal_inputs == "none"
    assert HFVisionEngine.multimodal_inputs == "processed"
    assert SGLangEngine.multimodal_inputs == "images" and SGLangEngine.can_sleep
    assert HFEngine.can_sleep and FastHFEngine.can_sleep and HFVisionEngine.can_sleep
    model, tok = tiny
    engine = HFEngine(model, tok)
    assert engine.precapture() == 0  # declared on the ABC: nothing to capture here


def test_precapture_covers_the_runs_sampling_modes() -> None:
    """What the engine captures at build follows the config: the training sampling's mode
    (FILTER with top-p/top-k, else SAMPLE) and GREEDY when a held-out eval runs, so neither
    a filtered training step nor the first eval captures graphs mid-run."""
    from agentrl.assembly.build import expected_sampling
    from agentrl.config import TrainConfig, load_config
    from agentrl.engines._fast_sampling import FILTER, GREEDY, SAMPLE
    from agentrl.engines.hf_fast import capture_modes

    plain = load_config(TrainConfig, None, ["sampling.temperature=1.0"])
    assert capture_modes(expected_sampling(plain)) == [GREEDY, SAMPLE]  # eval on by default
    top_p = load_config(TrainConfig, None, ["sampling.top_p=0.9", "data.eval_episodes=0"])
    assert capture_modes(expected_sampling(top_p)) == [FILTER]
    top_k = load_config(TrainConfig, None, ["sampling.top_k=20"])
    assert capture_modes(expected_sampling(top_k)) == [GREEDY, FILTER]
