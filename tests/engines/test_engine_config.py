"""One typed `EngineConfig` decides the engine: `build_engine` builds text / fast / vision /
vllm / sglang from it, and every `engine.*` key that the engine being built does not take is
one error naming the key (at config load where the config alone tells, else at build)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrl.assembly.validate import load_train_config
from agentrl.config import (
    ConfigError,
    EngineConfig,
    FastHFTuning,
    HFEngineConfig,
    HFTuning,
    TrainConfig,
    load_config,
)
from agentrl.engines import EngineError, HFEngine, build_engine, config_problems


def _load(*overrides: str) -> TrainConfig:
    return load_train_config(None, list(overrides))


def test_typed_hf_options_load_and_show() -> None:
    cfg = _load(
        "engine.hf.fast=true", "engine.hf.max_seq_len=512", "engine.hf.tuning.decode_chunk=4"
    )
    assert cfg.engine.hf.fast is True and cfg.engine.hf.max_seq_len == 512
    assert _load("engine.hf.fast=auto").engine.hf.fast == "auto"
    with pytest.raises(ConfigError, match=r"engine.hf.fast: 'sometimes' is not"):
        _load("engine.hf.fast=sometimes")
    with pytest.raises(ConfigError, match=r"engine.hf.tuning.decode_chunk: 0 is out of range"):
        _load("engine.hf.tuning.decode_chunk=0")
    with pytest.raises(ConfigError, match=r"engine.hf.max_sessions: 0 is out of range"):
        _load("engine.hf.max_sessions=0")
    with pytest.raises(ConfigError, match=r"engine.hf.tuning.join_every: 0 is out of range"):
        _load("engine.hf.tuning.join_every=0")


@pytest.mark.parametrize("fast", [True, False])
def test_join_every_reaches_both_text_engines(tiny: Any, fast: bool) -> None:
    model, tok = tiny
    cfg = _load(f"engine.hf.fast={str(fast).lower()}", "engine.hf.tuning.join_every=4")
    engine = build_engine(cfg.engine, model, tok)
    assert engine.join_every == 4
    asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.hf.fast=false", "engine.hf.max_seq_len=512"],
         r"engine.hf.max_seq_len: a fast-path option, but engine.hf.fast is false"),
        (["model.enable_vision=true", "engine.hf.tuning.compile_decode=true"],
         r"engine.hf.tuning.compile_decode: a fast-path option, but model.enable_vision builds "
         r"HFVisionEngine"),
        (["model.enable_vision=true", "engine.hf.fast=true"],
         r"engine.hf.fast: true, but model.enable_vision builds HFVisionEngine"),
        (["engine.kind=vllm", "model.path=/m", "engine.hf.tuning.admission_window_s=0"],
         r"engine.hf.tuning.admission_window_s: an option of engine.kind=hf; this config builds "
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
    cfg = EngineConfig(hf=HFEngineConfig(max_seq_len=512, tuning=FastHFTuning(share_prefill=False)))
    with pytest.raises(EngineError, match=r"engine.hf.max_seq_len: a fast-path option, but "
                       r"HFEngine runs \(fast=auto on cpu\)"):  # fmt: skip
        build_engine(cfg, model, tok)
    tuning = FastHFTuning(max_prefill_tokens=64)
    engine = build_engine(EngineConfig(hf=HFEngineConfig(tuning=tuning)), model, tok)
    assert type(engine) is HFEngine and engine.max_prefill_tokens == 64


def test_build_engine_refuses_what_validation_refuses(tiny: Any) -> None:
    model, tok = tiny
    cfg = EngineConfig(hf=HFEngineConfig(fast=False, tuning=FastHFTuning(decode_chunk=2)))
    with pytest.raises(EngineError, match="engine.hf.tuning.decode_chunk: a fast-path option"):
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
    from agentrl.engines._fast_sampling import FILTER, GREEDY, SAMPLE
    from agentrl.engines.hf_fast import capture_modes

    plain = load_config(TrainConfig, None, ["sampling.temperature=1.0"])
    assert capture_modes(expected_sampling(plain)) == [GREEDY, SAMPLE]  # eval on by default
    top_p = load_config(TrainConfig, None, ["sampling.top_p=0.9", "data.eval_episodes=0"])
    assert capture_modes(expected_sampling(top_p)) == [FILTER]
    top_k = load_config(TrainConfig, None, ["sampling.top_k=20"])
    assert capture_modes(expected_sampling(top_k)) == [GREEDY, FILTER]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("engine.hf.decode_chunk=4", "engine.hf.tuning.decode_chunk"),
        ("engine.hf.max_prefill_tokens=64", "engine.hf.tuning.max_prefill_tokens"),
        ("engine.hf.precapture=false", "engine.hf.tuning.precapture"),
        ("engine.hf.own_stream=false", r"FastHFEngine/HFEngine\(own_stream=...\)"),
        ("engine.hf.prefill_graphs=true", r"FastHFEngine\(prefill_graphs=...\)"),
        ("trainer.traced_attention=false", r"UpdateLevers\(traced_attention=...\)"),
    ],
)
def test_an_old_key_is_one_line_naming_the_new_one(old: str, new: str) -> None:
    """A key that moved (a speed knob into `engine.hf.tuning`, a comparison-only knob to a
    code-level lever) is refused at load, naming where it went, in one line."""
    key = old.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^<defaults> \+ overrides: {key}: .*{new}") as e:
        load_config(TrainConfig, None, [old])
    assert "\n" not in str(e.value)


def test_tuning_range_checks_are_the_tuning_class_own() -> None:
    """Each tuning class carries its bounds: at config load (the dotted key), when an engine
    is given one (the engine's name), and for every item of a list."""
    assert FastHFTuning().problems() == [] and HFTuning().problems() == []
    bad = FastHFTuning(decode_chunk=0, admission_window_s=-1.0)
    assert bad.problems("t.") == [
        "t.admission_window_s: -1.0 is out of range (must be >= 0)",
        "t.decode_chunk: 0 is out of range (must be >= 1)",
    ]
    assert FastHFTuning(batch_buckets=[1, 0]).problems() == [
        "batch_buckets: [1, 0] is out of range (must be >= 1)"
    ]
    assert FastHFTuning(session_slots=0).problems() == []  # 0: no parked slots
    assert FastHFTuning(session_slots=None).problems() == []  # null: the engine's default
    with pytest.raises(ConfigError, match=r"engine.hf.tuning.batch_buckets: \[0\] is out of"):
        load_config(TrainConfig, None, ["engine.hf.tuning.batch_buckets=[0]"])
    with pytest.raises(ConfigError, match=r"engine.hf.tuning.max_prefill_tokens: 0 is out of"):
        load_config(TrainConfig, None, ["engine.hf.tuning.max_prefill_tokens=0"])
    with pytest.raises(ValueError, match=r"HFEngine tuning.join_every: 0 is out of range"):
        HFEngine(object(), [], tuning=HFTuning(join_every=0))


def test_engines_take_their_tuning_as_one_object(tiny: Any) -> None:
    """The fast engine gets the whole `FastHFTuning`; HFEngine only the knobs every hf engine
    takes (`core()`), so a fast-only knob left at its default never reaches it."""
    model, tok = tiny
    tuning = FastHFTuning(max_prefill_tokens=64, join_every=3, decode_chunk=2)
    fast = build_engine(EngineConfig(hf=HFEngineConfig(fast=True, tuning=tuning)), model, tok)
    plain_tuning = FastHFTuning(max_prefill_tokens=64, join_every=3)
    plain = build_engine(EngineConfig(hf=HFEngineConfig(tuning=plain_tuning)), model, tok)
    try:
        assert fast.tuning == tuning and fast.decode_chunk == 2  # type: ignore[attr-defined]
        assert type(plain) is HFEngine and type(plain.tuning) is HFTuning
        assert plain.tuning == HFTuning(max_prefill_tokens=64, join_every=3)
    finally:
        asyncio.run(fast.close())
        asyncio.run(plain.close())
