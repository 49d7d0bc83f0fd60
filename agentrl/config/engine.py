"""`engine`: which engine a run builds and its options; `engine.hf.tuning`: how fast it runs.

Why a `tuning` section of its own: the in-process hf engines' speed knobs (how big a prefill,
how many decode steps per thread hop, which graphs to capture...) change how fast tokens come,
never which tokens come. They used to be loose `engine.hf.*` keys, each threaded through the
schema, the range table, the builder's option lists, the core, the fast engine and the docs.
Now each engine takes its tuning as one object (`HFTuning` for every hf engine,
`FastHFTuning` for `FastHFEngine`): a new knob is a field here (its comment the reference,
its bound in `metadata`) and the line of the engine that reads it. `agentrl config show`
prints a tuning section only where it differs from these defaults.

Knobs kept only to compare against (the engine's own CUDA stream, prefill graphs) are not
config keys: they are keyword arguments of the engine classes that benchmarks set on the
engines they build (`FastHFEngine(..., own_stream=False, prefill_graphs=True)`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal


def _at_least(lo: float) -> dict[str, float]:
    """A field's lower bound (inclusive), checked by `problems`."""
    return {"min": lo}


@dataclass(kw_only=True)
class HFTuning:
    """`engine.hf.tuning`: speed knobs every in-process hf engine takes (HFEngine,
    FastHFEngine, HFVisionEngine). Same tokens whatever the values."""

    # Prompt tokens one admission prefills at most.
    max_prefill_tokens: int = field(default=8192, metadata=_at_least(1))
    # Idle engine: wait this long per tick (at most 10) while requests keep arriving. 0: off.
    admission_window_s: float = field(default=0.002, metadata=_at_least(0))
    # While rows decode, waiting requests join every N decode steps (1: at the next step).
    # Larger N: fewer, larger prefill calls (each has a fixed host cost) for up to N - 1 steps
    # of join latency, like vLLM's scheduler delay factor.
    join_every: int = field(default=1, metadata=_at_least(1))
    # Capture every decode graph at build time, so no training step pays for a capture
    # (a no-op without CUDA graphs).
    precapture: bool = True

    def problems(self, prefix: str = "") -> list[str]:
        """One line per field out of its bound, named `prefix + field`."""
        out, current = [], dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            lo = f.metadata.get("min")
            value = current[f.name]
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                if lo is None or v is None or isinstance(v, bool):
                    continue
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= lo):
                    out.append(f"{prefix}{f.name}: {value!r} is out of range (must be >= {lo:g})")
                    break
        return out

    def check(self, owner: str) -> None:
        """ValueError naming the first field out of its bound (`owner`: who was given it)."""
        if problems := self.problems(f"{owner} tuning."):
            raise ValueError(problems[0])

    def changed(self) -> dict[str, Any]:
        """Fields that differ from a default-built tuning of this class."""
        default = dataclasses.asdict(type(self)())
        return {k: v for k, v in dataclasses.asdict(self).items() if v != default[k]}


@dataclass(kw_only=True)
class FastHFTuning(HFTuning):
    """`engine.hf.tuning` of `FastHFEngine` (static KV cache, own forward, CUDA graphs): the
    hf engines' knobs plus these. One of these changed where HFEngine or HFVisionEngine is
    built is an error naming it."""

    # Parked session slots beyond the running batch. null: max_batch_size (capped by
    # engine.hf.max_sessions).
    session_slots: int | None = field(default=None, metadata=_at_least(0))
    # Decode steps as CUDA graph replays. null: on CUDA.
    cuda_graphs: bool | None = None
    # Batch sizes the decode graphs are captured for (engine.max_batch_size is added).
    batch_buckets: list[int] = field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256], metadata=_at_least(1)
    )
    # Decode steps per worker-thread hop while no waiting request can join.
    decode_chunk: int = field(default=8, metadata=_at_least(1))
    # Identical prompts of one admission (a GRPO group) are prefilled once.
    share_prefill: bool = True
    # torch.compile the decode forward (captured into the graphs).
    compile_decode: bool = False
    # torch.compile the prefill forward (dynamic shapes, one graph; eager prefill is bound by
    # the host). Its compile is paid at build time with precapture, else by the first prefill.
    compile_prefill: bool = False

    def core(self) -> HFTuning:
        """The knobs every hf engine takes (what HFEngine / HFVisionEngine get)."""
        names = {f.name for f in dataclasses.fields(HFTuning)}
        return HFTuning(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})

    def fast_only_changed(self) -> list[str]:
        """Fast-path knobs set away from their defaults (an error where HFEngine runs)."""
        core = {f.name for f in dataclasses.fields(HFTuning)}
        return [k for k in self.changed() if k not in core]


@dataclass(kw_only=True)
class HFEngineConfig:
    """`engine.hf`: options of the in-process hf engines (docs/engines.md). `build_engine`
    builds HFVisionEngine (model.enable_vision), else FastHFEngine where `fast` resolves to
    true, else HFEngine. An option the engine that is built does not take is an error naming
    it (a fast-path option with fast=false, or where fast=auto resolves to HFEngine)."""

    # auto: FastHFEngine on CUDA for qwen2/qwen3/llama, HFEngine otherwise; true: FastHFEngine
    # (also on CPU, eager; an unsupported architecture is an error); false: HFEngine.
    fast: Literal["auto"] | bool = "auto"
    # Finished episodes whose KV is kept for their next turn (LRU). null: 1024, vision 256.
    max_sessions: int | None = None
    # Seconds one request may take (then finish_reason abort). null: no limit.
    request_timeout_s: float | None = None
    # The engine's device; empty: where the trainer puts the rollout model.
    device: str = ""
    # Whether a weight update keeps parked multi-turn sessions' KV (running rows always keep
    # theirs): later turns then attend to keys/values older weights computed, as PipelineRL
    # does, their age bounded like the tokens' (trainer.async.max_staleness); false: dropped,
    # later turns recompute their prefix. null: true with trainer.async.max_staleness >= 1
    # (set where the engine is built), else false (no session spans an update then).
    keep_kv_on_update: bool | None = None
    # Fast path only (FastHFEngine): static KV cache length per sequence; requests end with
    # "length" there. A changed value where it does not run is an error.
    max_seq_len: int = 4096
    # Speed knobs (`FastHFTuning`'s comments are their reference); only what differs from
    # the defaults is printed by `agentrl config show`.
    tuning: FastHFTuning = field(default_factory=FastHFTuning, metadata={"tuning": True})


@dataclass(kw_only=True)
class EngineConfig:
    kind: Literal["hf", "vllm", "sglang"] = "hf"
    # Most sequences decoded together; new episodes join between decode steps.
    max_batch_size: int = 64
    # vllm/sglang: server URL for server mode; empty = in-process engine.
    server_url: str = ""
    gpu_memory_utilization: float = 0.5
    # Between rollout and update, free the engine's accelerator memory (engine.sleep(), the
    # model/KV offload verl calls free_cache_engine); woken for the next rollout or weight
    # sync. For one GPU shared by trainer and engine; an engine without sleep is an error.
    sleep_between_phases: bool = False
    hf: HFEngineConfig = field(default_factory=HFEngineConfig)
    # vllm/sglang: backend engine arguments (docs/engines.md). The hf engine takes none: its
    # options are the typed `engine.hf` section.
    extra: dict[str, Any] = field(default_factory=dict)


# Keys that moved, old dotted key -> where it went: an old key is one line naming the new one.
MOVED_KEYS: dict[str, str] = {
    **{
        f"engine.hf.{f.name}": f"moved to engine.hf.tuning.{f.name}"
        for f in dataclasses.fields(FastHFTuning)
    },
    "engine.hf.own_stream": (
        "a code-level lever now, not a config key: FastHFEngine/HFEngine(own_stream=...), "
        "set by benchmarks on the engine they build (default true)"
    ),
    "engine.hf.prefill_graphs": (
        "a code-level lever now, not a config key: FastHFEngine(prefill_graphs=...), "
        "set by benchmarks on the engine they build (default false)"
    ),
    "trainer.traced_attention": (
        "a code-level lever now, not a config key: UpdateLevers(traced_attention=...) "
        "(agentrl/trainer/levers.py), on for every packed update"
    ),
}
