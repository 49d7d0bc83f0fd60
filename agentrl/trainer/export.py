"""Checkpoints a user can take away: plain HF directories next to the resumable state.

Why: `state.pt` (model + optimizer + RNG + data cursor) is for `--resume`, not for anyone
else. What people do with a trained policy is `AutoModelForCausalLM.from_pretrained(dir)`,
serve it with vLLM, or load a LoRA adapter with `PeftModel.from_pretrained`. So every kept
checkpoint also carries `hf/`, and the end of training writes `final/`:

    runs/x/config.yaml                      the resolved config the run used
    runs/x/checkpoints/step_000050/state.pt resumable state
    runs/x/checkpoints/step_000050/hf/      config.json, model.safetensors, tokenizer, template
    runs/x/checkpoints/step_000050/hf/adapter/   LoRA runs: the PEFT adapter alone
    runs/x/final/                           the same for the last step

The HF directory always holds the *merged* weights (LoRA folded in), so it loads with no peft
installed. Weights come from `Actor.named_weights()`, the same full, merged, HF-named tensors
the rollout engine receives (gathered on sharded backends), so what is exported is exactly
the policy that sampled. `agentrl export RUN [--step N] --out DIR` rebuilds the same directory
from a run's `state.pt` (runs/x/config.yaml tells it which base model to start from).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

HF_DIR = "hf"
ADAPTER_DIR = "adapter"
FINAL_DIR = "final"


def write_config(cfg: Any, out_dir: Path) -> Path:
    """`config.yaml` in the run folder: every field, defaults resolved (re-runnable as is)."""
    import yaml

    from agentrl.config import to_dict

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "config.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return path


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under DDP/FSDP (`.module`) and peft wrappers."""
    model = getattr(model, "module", model)
    if is_peft(model):
        peft_model: Any = model  # a peft PeftModel; torch types its methods as Tensor | Module
        model = peft_model.get_base_model()
    return model


def is_peft(model: torch.nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(getattr(model, "module", model), PeftModel)


def export_hf(
    model: torch.nn.Module,
    weights: dict[str, torch.Tensor],
    tokenizer: Any,
    out: Path,
    *,
    chat_template: str | None = None,
) -> Path:
    """Write `out/` (merged weights `weights`, `model`'s config, tokenizer + chat template)
    and, for a peft model, `out/adapter/` (the adapter alone)."""
    out.mkdir(parents=True, exist_ok=True)
    plain: Any = base_model(model)  # a transformers PreTrainedModel
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in weights.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradient-checkpointing / generation-config chatter
        # Trainers turn the KV cache off for checkpointing; users want it. A VLM keeps the
        # flag on its text config (the composite config has none).
        text_cfg = plain.config.get_text_config()
        use_cache = getattr(text_cfg, "use_cache", None)
        if use_cache is not None:
            text_cfg.use_cache = True
        try:
            plain.save_pretrained(out, state_dict=cpu)
        finally:
            if use_cache is not None:
                text_cfg.use_cache = use_cache
        if is_peft(model):
            peft_model: Any = getattr(model, "module", model)
            peft_model.save_pretrained(out / ADAPTER_DIR)
    if chat_template and chat_template != getattr(tokenizer, "chat_template", None):
        import copy

        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(out)
    return out


def checkpoint_dir(run: Path, step: int | None) -> Path:
    """The checkpoint directory of `run` at `step` (default: the latest), or a clear error."""
    from .checkpoint import Checkpointer

    ckpts = Checkpointer(run)
    if step is None:
        found = ckpts.latest()
        if found is None:
            raise FileNotFoundError(f"{run} has no checkpoint (train with trainer.save_every=N)")
        return found
    path = ckpts.root / f"step_{step:06d}"
    if not (path / "state.pt").exists():
        kept = sorted(p.name for p in ckpts.root.glob("step_*")) if ckpts.root.exists() else []
        raise FileNotFoundError(f"{run} has no checkpoint for step {step}; kept: {kept or 'none'}")
    return path


def export_run(run: str | Path, out: str | Path, step: int | None = None) -> Path:
    """Rebuild the HF directory (and LoRA adapter) of `run`'s checkpoint at `out`: the base
    model of `run/config.yaml`, with the checkpoint's weights loaded."""
    from agentrl.config import TrainConfig, load_config
    from agentrl.models.load import load_model, load_tokenizer
    from agentrl.models.lora import merged_weights

    run, out = Path(run), Path(out)
    if not (run / "config.yaml").exists():
        raise FileNotFoundError(f"{run} is not a run folder (no config.yaml)")
    ckpt = checkpoint_dir(run, step)
    cfg = load_config(TrainConfig, str(run / "config.yaml"), [])
    cfg.model.gradient_checkpointing = False
    model = load_model(cfg.model, trainable=True)
    state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    weights = dict(merged_weights(model)) if is_peft(model) else dict(model.state_dict())
    return export_hf(model, weights, load_tokenizer(cfg.model), out)
