"""Translate a verl PPO/GRPO YAML (Hydra `ppo_trainer` layout) into an agentrl `TrainConfig`.

    result = import_verl(yaml.safe_load(open("verl_grpo.yaml")))
    result.config      # nested mapping, valid for load_train_config(...)
    result.unmapped    # {"actor_rollout_ref.actor.use_dynamic_bsz": "reason", ...}

Why a translator and not a compatibility layer: verl's tree has ~550 leaves, most of them
engine/sharding knobs with no meaning here. We map the ones that decide *what is trained*
(algorithm, batch geometry, lengths, sampling, optimizer, LoRA, schedule) and name every other
key by dotted path, so nothing is dropped silently. Keys are sorted into three buckets:

- mapped: written to the agentrl config;
- inactive: settings of a feature the verl config has switched off (e.g. `kl_ctrl.*` with
  `use_kl_in_reward: false`); nothing is lost by dropping them;
- unmapped: the key has an effect in verl that agentrl cannot express (with the reason).

Semantics that differ: verl's `ppo_mini_batch_size` counts prompts (it is multiplied by
`rollout.n`), agentrl's `trainer.mini_batch_size` counts trajectories; verl's
`max_response_length` is the whole (multi-turn) response budget, which becomes both the
per-turn `sampling.max_new_tokens` and, with the prompt length, `rollout.max_total_tokens`.
The dataset keys and the env the rows train on are `_data`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from agentrl.config import TrainConfig

from . import _algorithm as algo_rules
from . import _data as data_rules
from . import _rules as rules
from ._rules import Ctx

# Hydra/OmegaConf bookkeeping, not settings.
META = re.compile(r"(^|\.)(_target_|defaults|hydra)(\.|$)")
_REF = re.compile(r"\$\{(?:oc\.select:)?([\w.]+)(?:,([^}]*))?\}")


@dataclass
class ImportResult:
    config: dict[str, Any]
    mapped: list[str] = field(default_factory=list)
    unmapped: dict[str, str] = field(default_factory=dict)
    inactive: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Mapped, but agentrl trains differently from verl here (the user should know).
    warnings: list[str] = field(default_factory=list)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a nested mapping by dotted path (lists are leaves)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out |= flatten(v, key) if isinstance(v, dict) and v else {key: v}
    return out


def _resolve(flat: dict[str, Any], value: Any, depth: int = 0) -> Any:
    """Resolve `${a.b}` / `${oc.select:a.b,default}` references against the same file."""
    if not isinstance(value, str) or "${" not in value or depth > 8:
        return value
    whole = _REF.fullmatch(value.strip())
    if whole:
        key, default = whole.group(1), whole.group(2)
        if key in flat:
            return _resolve(flat, flat[key], depth + 1)
        return _scalar(default) if default is not None else value
    return _REF.sub(
        lambda m: str(_resolve(flat, flat.get(m.group(1), m.group(0)), depth + 1)), value
    )


def _scalar(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def import_verl(tree: dict[str, Any], env: str | None = None) -> ImportResult:
    """Map a parsed verl YAML onto agentrl config keys; see the module docstring."""
    flat = flatten(tree)
    flat = {k: _resolve(flat, v) for k, v in flat.items() if not META.search(k)}
    c = Ctx(flat, ImportResult({}))
    data_rules.data(c)
    rules.model(c)
    n = rules.rollout(c)
    rules.trainer(c)  # before the optimizer: warmup ratios need trainer.steps
    algo_rules.algorithm(c)
    rules.actor(c, n)
    algo_rules.policy(c)
    rules.reward_and_critic(c)
    data_rules.env(c, env)
    for key in list(c.flat):
        if key not in c.used:
            c.unmapped(key, "no agentrl equivalent")
    c.result.mapped = sorted(c.used - set(c.result.unmapped) - set(c.result.inactive))
    return c.result


def to_yaml(result: ImportResult, source: str = "") -> str:
    """The agentrl YAML, headed by comments naming the source and every unmapped key."""
    import yaml

    lines = [f"# Imported from verl config {source}".rstrip(), "#"]
    if result.unmapped:
        lines.append("# Not mapped (dotted verl key: why):")
        lines += [f"#   {k}: {why}" for k, why in sorted(result.unmapped.items())]
    lines += [f"# Warning: {w}" for w in result.warnings]
    lines += [f"# Note: {n}" for n in result.notes]
    order = [f.name for f in fields(TrainConfig)]
    ordered = {k: result.config[k] for k in sorted(result.config, key=order.index)}
    body = yaml.safe_dump(ordered, sort_keys=False)
    return "\n".join(lines) + "\n" + body
