"""The rules of `agentrl config import-verl`: one function per verl section.

Each rule reads verl leaves through `Ctx.get` (which marks them handled) and writes agentrl
keys with `Ctx.put`; a key it reads but cannot express goes to `unmapped` with the reason, a
key of a switched-off feature to `inactive`. See `importer` for the semantics that differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._data import steps_from_epochs

if TYPE_CHECKING:
    from .importer import ImportResult

ENGINES = {"vllm", "sglang", "hf"}

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
M = "actor_rollout_ref.model."
REF = "actor_rollout_ref.ref."


class Ctx:
    """The verl leaves, which of them were used, and the agentrl mapping being built."""

    def __init__(self, flat: dict[str, Any], result: ImportResult) -> None:
        self.flat = flat
        self.result = result
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.flat and self.flat[key] is not None

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key` (marking it handled), or `default` when absent or null."""
        if key in self.flat:
            self.used.add(key)
            if self.flat[key] is not None:
                return self.flat[key]
        return default

    def put(self, dotted: str, value: Any) -> None:
        node = self.result.config
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    def unmapped(self, key: str, reason: str) -> None:
        if key in self.flat:
            self.used.add(key)
            if self.flat[key] is None:
                self.result.inactive[key] = "unset (null)"
            else:
                self.result.unmapped[key] = reason

    def inactive(self, prefix: str, reason: str) -> None:
        """Every key under `prefix` belongs to a feature verl has switched off."""
        for k in self.flat:
            if (k == prefix or k.startswith(prefix + ".")) and k not in self.used:
                self.used.add(k)
                self.result.inactive[k] = reason

    def direct(self, table: dict[str, tuple[str, Any]]) -> None:
        for src, (dst, convert) in table.items():
            value = self.get(src)
            if value is not None:
                self.put(dst, convert(value) if convert else value)


def model(c: Ctx) -> None:
    path = c.get(M + "path")
    if path is not None:
        c.put("model.path", str(path))
        if not str(path).startswith(("/", ".", "~", "tiny:")):
            c.result.notes.append(
                f"model.path {path!r} looks like a hub id; agentrl loads local directories "
                "(download it first and point model.path there)"
            )
    rank = c.get(M + "lora_rank", 0)
    if rank and int(rank) > 0:
        lora: dict[str, Any] = {"enabled": True, "r": int(rank)}
        lora["alpha"] = int(c.get(M + "lora_alpha", 2 * int(rank)))
        targets = c.get(M + "target_modules", "all-linear")
        lora["target_modules"] = [targets] if isinstance(targets, str) else list(targets)
        c.put("model.lora", lora)
    else:
        for key in ("lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path"):
            c.inactive(M + key, "lora_rank is 0")
    c.direct({M + "enable_gradient_checkpointing": ("model.gradient_checkpointing", bool)})


def actor(c: Ctx, n: int) -> None:
    """Optimizer, batch geometry and memory keys of the actor (its loss keys: _algorithm)."""
    c.direct(
        {
            A + "optim.lr": ("optim.lr", float),
            A + "optim.weight_decay": ("optim.weight_decay", float),
            A + "optim.betas": ("optim.betas", list),
            A + "optim.clip_grad": ("optim.grad_clip", float),
            A + "grad_clip": ("optim.grad_clip", float),
            A + "ppo_epochs": ("trainer.ppo_epochs", int),
            A + "ppo_micro_batch_size_per_gpu": ("trainer.micro_batch_size", int),
        }
    )
    mini = c.get(A + "ppo_mini_batch_size")
    if mini is not None:
        c.put("trainer.mini_batch_size", int(mini) * n)  # verl counts prompts
    _optim_schedule(c)
    strategy = c.get(A + "strategy")
    if strategy in ("fsdp", "fsdp2"):
        c.put("trainer.backend", "fsdp2")
    elif strategy == "megatron":
        c.put("trainer.backend", "megatron")
    _memory_levers(c)


def _memory_levers(c: Ctx) -> None:
    """Packing, Ulysses and offload. verl sets offload per role; agentrl's switches cover
    every trained/frozen model, so any role asking for offload turns it on."""
    c.direct(
        {
            M + "use_remove_padding": ("trainer.packing", bool),
            A + "ulysses_sequence_parallel_size": ("trainer.ulysses_sp", int),
        }
    )
    for key, dst in (
        ("param_offload", "trainer.param_offload"),
        ("optimizer_offload", "trainer.optimizer_offload"),
        ("offload_policy", "trainer.fsdp_offload_policy"),
    ):
        found = [r + "fsdp_config." + key for r in (A, REF) if c.has(r + "fsdp_config." + key)]
        if found:
            c.put(dst, any(bool(c.get(k)) for k in found))


def _optim_schedule(c: Ctx) -> None:
    style = c.get(A + "optim.lr_scheduler_type") or c.get(A + "optim.warmup_style")
    if style in ("constant", "cosine"):
        c.put("optim.scheduler", style)
    elif style is not None:
        c.unmapped(A + "optim.lr_scheduler_type", f"no agentrl scheduler {style!r}")
    warmup = c.get(A + "optim.lr_warmup_steps", -1)
    ratio = c.get(A + "optim.lr_warmup_steps_ratio", 0.0)
    if warmup is not None and int(warmup) > 0:
        c.put("optim.warmup_steps", int(warmup))
    elif ratio:
        steps = c.result.config.get("trainer", {}).get("steps")
        if steps:
            c.put("optim.warmup_steps", int(float(ratio) * steps))
        else:
            c.unmapped(A + "optim.lr_warmup_steps_ratio", "needs trainer.total_training_steps")
    c.get(A + "optim.total_training_steps")  # filled in by verl at runtime


def rollout(c: Ctx) -> int:
    """Rollout/sampling keys; returns rollout.n (needed to convert verl's prompt counts)."""
    n = int(c.get(R + "n", 1))
    c.put("rollout.n", n)
    name = c.get(R + "name")
    if name in ENGINES:
        c.put("engine.kind", name)
    elif name == "???":  # OmegaConf's "mandatory": verl's composed file leaves it to the CLI
        c.unmapped(R + "name", "??? (verl sets it on the command line); engine.kind stays hf")
    elif name is not None:
        c.unmapped(R + "name", f"no agentrl engine {name!r}")
    top_k = c.get(R + "top_k")
    if top_k is not None:
        c.put("sampling.top_k", max(int(top_k), 0))  # verl: -1 = off; agentrl: 0 = off
    c.direct(
        {
            R + "temperature": ("sampling.temperature", float),
            R + "top_p": ("sampling.top_p", float),
            R + "gpu_memory_utilization": ("engine.gpu_memory_utilization", float),
            R + "log_prob_micro_batch_size_per_gpu": ("trainer.logprob_micro_batch_size", int),
            R + "max_num_seqs": ("engine.max_batch_size", int),
        }
    )
    tp = int(c.get(R + "tensor_model_parallel_size", 1))
    if tp > 1 and name in ("vllm", "sglang"):
        key = "tp_size" if name == "sglang" else "tensor_parallel_size"
        c.put("engine.extra", {key: tp})
    elif tp > 1:  # the hf engine has no tensor parallelism: never an invalid engine.extra
        c.unmapped(R + "tensor_model_parallel_size", f"{tp}: the hf engine is not sharded")
    enable = c.get(R + "multi_turn.enable")
    if enable is False:  # verl generates one response: one assistant turn
        c.put("rollout.max_turns", 1)
        c.inactive(R + "multi_turn", "multi_turn.enable is false")
    elif enable is None and not any(k.startswith(R + "multi_turn.") for k in c.flat):
        c.result.notes.append("no multi_turn section (single-turn in verl); rollout.max_turns kept")
    else:
        _multi_turn(c)
    c.get(R + "mode")  # sync/async: agentrl's engines are always async
    c.get(R + "calculate_log_probs")  # agentrl engines always return logprobs
    ref_mb = c.get("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu")
    if ref_mb is not None and "logprob_micro_batch_size" not in c.result.config.get("trainer", {}):
        c.put("trainer.logprob_micro_batch_size", int(ref_mb))
    return n


def _multi_turn(c: Ctx) -> None:
    c.direct({R + "multi_turn.max_assistant_turns": ("rollout.max_turns", int)})
    fmt = c.get(R + "multi_turn.format")
    if fmt in ("hermes", "llama3"):
        c.put("rollout.tool_format", fmt)
    elif fmt is not None:
        c.unmapped(R + "multi_turn.format", f"no agentrl tool format {fmt!r}")
    c.unmapped(R + "multi_turn.tool_config_path", "tools come from the env: set data.env")
    c.unmapped(R + "multi_turn.interaction_config_path", "user turns come from the env")
    c.unmapped(R + "multi_turn.max_user_turns", "user turns come from the env")


def trainer(c: Ctx) -> None:
    c.direct(
        {
            "trainer.total_training_steps": ("trainer.steps", int),
            "trainer.n_gpus_per_node": ("trainer.n_gpus_per_node", int),
            "trainer.nnodes": ("trainer.nnodes", int),
        }
    )
    if "steps" in c.result.config.get("trainer", {}):
        c.inactive("trainer.total_epochs", "total_training_steps takes precedence")
    epochs = c.get("trainer.total_epochs")
    if "steps" not in c.result.config.get("trainer", {}) and epochs is not None:
        steps = steps_from_epochs(c, int(epochs))
        if steps:
            c.put("trainer.steps", steps)
            c.result.notes.append(f"trainer.steps={steps} from total_epochs={epochs}")
        else:
            c.unmapped("trainer.total_epochs", "dataset not readable here; set trainer.steps")
    for src, dst in (("trainer.save_freq", "save_every"), ("trainer.test_freq", "eval_every")):
        value = c.get(src)
        if value is not None:
            c.put(f"trainer.{dst}", max(int(value), 0))  # verl: -1 = never
    project, name = c.get("trainer.project_name"), c.get("trainer.experiment_name")
    out = c.get("trainer.default_local_dir")
    if out is None and project and name:
        out = f"runs/{project}/{name}"
    if out is not None:
        c.put("trainer.out_dir", str(out))
    loggers = c.get("trainer.logger")
    if loggers is not None:
        loggers = [loggers] if isinstance(loggers, str) else list(loggers)
        c.put("trainer.tensorboard", "tensorboard" in loggers)
        c.put("trainer.wandb", "wandb" in loggers)
        extra = [x for x in loggers if x not in ("console", "tensorboard", "wandb")]
        if extra:
            c.unmapped("trainer.logger", f"agentrl logs to console/jsonl/TB/wandb, not {extra}")
    device = c.get("trainer.device")
    if device in ("cuda", "cpu"):
        c.put("trainer.device", device)
    elif device is not None:
        c.unmapped("trainer.device", f"no agentrl device {device!r}")
    c.unmapped("trainer.resume_mode", "pass --resume to agentrl train")
    c.get("trainer.val_before_train")  # agentrl evaluates before training when eval_episodes>0


def reward_and_critic(c: Ctx) -> None:
    if c.get("reward_model.enable"):
        c.unmapped("reward_model.enable", "rewards come from the env (its verifier)")
    else:
        c.inactive("reward_model.model", "reward_model.enable is false")
    if c.get("reward_model.overlong_buffer.enable"):
        c.put("algorithm.overlong_buffer", int(c.get("reward_model.overlong_buffer.len", 0)))
        factor = c.get("reward_model.overlong_buffer.penalty_factor", 1.0)
        c.put("algorithm.overlong_penalty", float(factor))
    c.inactive("reward_model.overlong_buffer", "overlong_buffer.enable is false")
    c.unmapped("reward_model.reward_manager", "rewards come from the env (its verifier)")
    c.unmapped("custom_reward_function.path", "rewards come from the env: set data.env")
    c.get("custom_reward_function.name")
    if c.result.config.get("algorithm", {}).get("adv_estimator") != "gae":
        c.inactive("critic", "the advantage estimator needs no critic")
        return
    c.direct({"critic.cliprange_value": ("algorithm.value_clip", float)})
    path = c.get("critic.model.path")
    if path is not None and path != c.result.config.get("model", {}).get("path"):
        c.unmapped("critic.model.path", "agentrl's critic starts from the policy checkpoint")
    lr = c.get("critic.optim.lr")
    if lr is not None and float(lr) != c.result.config.get("optim", {}).get("lr"):
        c.unmapped("critic.optim.lr", "agentrl's critic uses optim.lr")
