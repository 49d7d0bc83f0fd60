"""`agentrl.config.validate` (ranges) and `agentrl.assembly.validate` (registries): every
numeric key has a range, the defaults satisfy them, and the `engine.extra` key lists match
what the engines really take."""

from __future__ import annotations

import inspect

import pytest

from agentrl.assembly.validate import load_train_config
from agentrl.config import ConfigError, TrainConfig, load_config
from agentrl.config.validate import RANGES, Range, numeric_fields, validate


def test_every_numeric_field_has_a_range_and_defaults_fit():
    keys = {k for k, _ in numeric_fields(TrainConfig())}
    # default null (the env's own limit; no limit on invalid calls); checked when set
    optional = {"rollout.max_turns", "rollout.max_invalid_tool_calls"}
    assert keys - set(RANGES) == set(), "add these keys to validate.RANGES"
    assert set(RANGES) - keys == optional, "RANGES names keys that no longer exist"
    validate(TrainConfig())
    with pytest.raises(ConfigError, match="rollout.max_turns: 0 is out of range"):
        load_config(TrainConfig, None, ["rollout.max_turns=0"])


def test_range_text_and_extra_values():
    dual = RANGES["algorithm.dual_clip_c"]
    assert dual.contains(0.0) and dual.contains(3.0) and not dual.contains(0.5)
    assert str(dual) == "> 1, or 0"
    assert not Range(0).contains(float("nan"))
    with pytest.raises(ConfigError, match=r"optim.betas: \(0.9, 1.5\) is out of range"):
        load_config(TrainConfig, None, ["optim.betas=[0.9, 1.5]"])


def test_hf_options_match_the_engines():
    """`engine.hf`'s typed fields are the hf engines' keyword arguments (plus `fast`, which
    `build_engine` reads; less the code-level levers benchmarks set), with the same defaults
    where not null; the speed knobs come as one `tuning` object whose defaults are what an
    engine built without one runs with."""
    import dataclasses

    from agentrl.config import FastHFTuning, HFEngineConfig
    from agentrl.engines._hf_core import HFCore
    from agentrl.engines.hf_fast import FastHFEngine

    def kwargs(cls: type) -> dict[str, object]:
        params = inspect.signature(cls.__init__).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    core, fast = kwargs(HFCore), kwargs(FastHFEngine)
    levers = {"own_stream", "prefill_graphs"}  # code-level, kept for comparison
    taken = (core | fast).keys() - {"max_batch_size"} - levers  # max_batch_size: engine.*
    cfg = HFEngineConfig()
    fields = {f.name for f in dataclasses.fields(cfg)}
    assert fields == taken | {"fast"}
    assert fast.keys() - core.keys() == {"max_seq_len", "prefill_graphs"}
    for name in taken - {"device", "tuning"}:
        if getattr(cfg, name) is not None:  # null: the engine's own default
            assert getattr(cfg, name) == fast[name]
    assert core["tuning"] is None and fast["tuning"] is None  # None: the class's defaults
    assert cfg.tuning == FastHFTuning()


def test_server_mode_extra_keys():
    cfg = load_train_config(
        None, ["engine.kind=vllm", "engine.server_url=http://x", "model.path=/m"]
    )
    assert cfg.engine.kind == "vllm"
    with pytest.raises(ConfigError, match=r"engine.extra.weight_sink_dir: .*did you mean"):
        load_train_config(
            None,
            ["engine.kind=sglang", "engine.server_url=http://x", "engine.extra.weight_sink_dir=a"],
        )


def test_vision_engine_rejects_unknown_extra():
    with pytest.raises(ConfigError, match=r"engine.extra.fast: not an option"):
        load_train_config(None, ["model.enable_vision=true", "engine.extra.fast=true"])


def test_auto_cpu_threads_uses_idle_cores(monkeypatch):
    from agentrl.trainer.threads import auto_threads, choose_cpu_threads

    assert auto_threads(2, 0.2) == 2  # quiet: every core
    assert auto_threads(2, 1.2) == 1
    assert auto_threads(2, 16.0) == 1  # busy: never fewer than one
    assert auto_threads(64, 10.0) == 54
    assert choose_cpu_threads(3) == (3, "trainer.cpu_threads")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert choose_cpu_threads(0, "cuda")[0] == 1  # a CUDA run's host thread only launches
    assert choose_cpu_threads(4, "cuda") == (4, "trainer.cpu_threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert choose_cpu_threads(0)[1] == "OMP_NUM_THREADS"
    assert choose_cpu_threads(0, "cuda")[1] == "OMP_NUM_THREADS"


def test_packed_updates_get_traced_attention_and_host_packing(tiny_model_dir):
    """With packing the actor traces attention and packs on the host (the measured fastest
    update, BENCHMARKS.md); without packing neither applies. The eager branch is a code-level
    lever now (`UpdateLevers(traced_attention=False)`), not a config key."""
    from agentrl.assembly.build import build_learner
    from agentrl.backends import TorchBackend
    from agentrl.models.load import load_model

    sets = ["model.path=tiny:qwen2", f"model.cache_dir={tiny_model_dir.parent}"]
    expected = {
        (): (False, False),
        ("trainer.packing=true",): (True, True),
    }
    for extra, (traced, host_pack) in expected.items():
        cfg = load_config(TrainConfig, None, [*sets, *extra])
        actor, _, _ = build_learner(cfg, load_model(cfg.model), TorchBackend("cpu"))
        assert (actor.levers.traced_attention, actor.levers.host_pack) == (traced, host_pack)


def test_pipelined_steps_need_an_engine_that_stamps_versions():
    """K >= 1 needs per-token weight versions: the hf engines and vLLM, in-process or a
    server (tested for real in tests/engines/real_vllm/test_vllm_real_async_train.py),
    stamp them; SGLang does not."""
    k1 = ["trainer.async.max_staleness=1"]
    for ok in (
        ["engine.kind=hf"],
        ["engine.kind=vllm"],
        ["engine.kind=vllm", "engine.server_url=http://x"],
    ):
        load_train_config(None, [*k1, *ok, "model.path=/m"])
    with pytest.raises(ConfigError, match="other than hf or vllm"):
        load_train_config(None, [*k1, "engine.kind=sglang", "model.path=/m"])


def test_process_producer_refuses_what_it_cannot_run():
    with pytest.raises(ConfigError, match="producer: process does not combine with engine.kind"):
        load_train_config(None, ["trainer.async.producer=process", "engine.kind=vllm"])
    with pytest.raises(ConfigError, match="trainer.async.producer_timeout_s"):
        load_train_config(None, ["trainer.async.producer_timeout_s=0"])
