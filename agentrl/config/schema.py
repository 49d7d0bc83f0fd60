"""The config tree of `agentrl train`: one dataclass per component, YAML maps onto it 1:1.

Nothing here imports a component: they are built from this tree elsewhere (docs/wiring.md), so
reading or printing a config never imports torch. The engine's section (and its `tuning`)
lives in `engine.py`; checks that need a registry run in the wiring room
(`agentrl.assembly.validate`).
Field comments are the reference documentation of each key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .engine import EngineConfig


@dataclass(kw_only=True)
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )


@dataclass(kw_only=True)
class ModelConfig:
    # A local HF checkpoint directory, or "tiny:<preset>" for a random-init model built from a
    # transformers config with a locally trained tokenizer (see agentrl.models.tiny).
    path: str = "tiny:qwen2"
    # Optional tokenizer directory; defaults to `path`.
    tokenizer: str | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] = "sdpa"
    gradient_checkpointing: bool = False
    # Which kernels every role's forward runs (engine, actor, reference, critic). default:
    # torch's and `attn_implementation`'s. batch_invariant: linear layers, attention and row
    # reductions whose result for a token depends only on that token's own sequence, never on
    # the batch around it or the layout (one decode step over a KV cache vs the trainer's full
    # forward), so the hf engine's log-probs equal the trainer's bit for bit and the
    # rollout/train mismatch (`rollout_kl`) is exactly 0. CPU float32, hf engine, one intra-op
    # thread (trainer.cpu_threads: 1); slower (docs/algorithms.md,
    # agentrl/models/batch_invariant.py).
    kernels: Literal["default", "batch_invariant"] = "default"
    # Where tiny models/tokenizers are cached once built.
    cache_dir: str = "~/.cache/agentrl"
    lora: LoraConfig = field(default_factory=LoraConfig)
    enable_vision: bool = False


@dataclass(kw_only=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    # Per-turn generation budget (observations do not count against it).
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class HarnessConfig:
    """Train an agent program, unchanged (docs/rollout.md, "Training an agent program"): per
    episode the trainer opens a session on an in-process recording gateway over the training
    engine, runs the program against it and trains on what the gateway recorded. Set `agent`
    or `command` (not both); with neither, episodes are run by the built-in env loop."""

    # A Python callable "module:function", called as function(task, base_url) in a child
    # process (its own interpreter: it cannot reach the trainer, the gateway's admin token or
    # the grader). `task`: {"prompt", "messages", "tools", "seed", "env", "tools_url"} (the
    # env's own tools over HTTP, docs/rollout.md); `base_url`: the episode's OpenAI base URL. It returns the final answer (a string), a dict with
    # "answer" (and "reward" for `reward: agent`), or None (the session's last assistant text).
    agent: str = ""
    # A command line run instead, with OPENAI_BASE_URL / OPENAI_API_KEY / ANTHROPIC_BASE_URL /
    # ANTHROPIC_API_KEY pointing at the session and the task as JSON in $AGENTRL_TASK; its
    # answer is its last line of stdout, or JSON written to $AGENTRL_RESULT.
    command: list[str] = field(default_factory=list)
    # Modules imported once by a warm parent process, from which each `agent` run is forked
    # instead of starting a fresh interpreter (e.g. [agents] for the OpenAI Agents SDK: its
    # ~2.7 s of import CPU is paid once, not per run). Each run still gets its own process
    # group, environment and working directory, and imports the `agent` module itself (which
    # may read OPENAI_BASE_URL at import). A module that starts a thread at import is refused.
    # [] (the default): a fresh interpreter per run. Only with `agent`.
    preload: list[str] = field(default_factory=list)
    # Wall-clock limit of one agent run; past it the program is killed and the episode is an
    # infrastructure failure (termination "timeout"), never a zero reward.
    timeout_s: float = 300.0
    # Who scores an episode: "env" (the env's grader on the agent's final answer, i.e.
    # env.step(assistant message)), "agent" (the "reward" the program returns: its own
    # grader), "function" (`reward_fn`).
    reward: Literal["env", "agent", "function"] = "env"
    # "module:function" called as function(task, answer) -> float, for `reward: function`.
    reward_fn: str = ""
    # The API key handed to the agent (the gateway does not check it; SDKs insist on one).
    api_key: str = "agentrl"
    # "required" or a tool's name: sample each episode's first model request that offers
    # tools under `tool_choice: auto` as one grammar-constrained call (of that tool where the
    # request offers it), named in the segment's metadata["constrained_turns"]: to bootstrap a
    # model that does not call tools yet behind a program that cannot ask for a call. ""
    # (the default) is off: a forced turn is not the policy's free choice.
    force_first_tool_call: str = ""
    # Where `command` runs: "none" (a plain child process as the trainer's user: it can read
    # what the trainer can) or "local" (bubblewrap, root only: its own tmpfs /work and /tmp,
    # the Python runtime and `readonly_paths` read-only, a private network whose loopback
    # reaches only the gateway's port; docs/sandbox.md, "Sandboxed commands"). "none" is the
    # default because "local" needs root and bubblewrap, which most training hosts lack.
    sandbox: Literal["none", "local"] = "none"
    # Host paths the sandboxed command may read (its own code, a node runtime), bound
    # read-only at the same path; absolute. Nothing else of the trainer's files is visible.
    readonly_paths: list[str] = field(default_factory=list)
    # Size of each of the sandbox's tmpfs /work and /tmp (MiB; memory, not disk).
    sandbox_disk_mb: int = 256

    @property
    def enabled(self) -> bool:
        return bool(self.agent or self.command)

    def __post_init__(self) -> None:
        if self.agent and self.command:
            raise ValueError("rollout.harness: set agent or command, not both")
        if self.preload and not self.agent:
            raise ValueError(
                "rollout.harness.preload forks `agent` runs from a warm parent; a `command` "
                "starts its own program, so set agent or leave preload empty"
            )
        if self.agent and ":" not in self.agent:
            raise ValueError(f"rollout.harness.agent must be 'module:function', got {self.agent!r}")
        if self.reward == "function" and ":" not in self.reward_fn:
            raise ValueError("rollout.harness.reward: function needs reward_fn 'module:function'")
        if self.sandbox == "local" and self.agent:
            raise ValueError(
                "rollout.harness.sandbox: local runs a command line; for a Python agent set "
                "command (e.g. [python, my_agent.py]) instead of agent"
            )
        for path in self.readonly_paths:
            if not path.startswith("/"):
                raise ValueError(f"rollout.harness.readonly_paths: {path!r} is not absolute")


@dataclass(kw_only=True)
class RolloutConfig:
    # Samples per prompt (the group size for GRPO/RLOO); the trainer passes it to every
    # collect (the runner has no default of its own).
    n: int = 4
    # Turn limit; null = the env's own `max_turns` (AgentEnv), a number overrides it. Hitting
    # either ends the episode as termination "max_turns".
    max_turns: int | None = None
    # Whole-episode budget: prompt + all turns + observations.
    max_total_tokens: int = 1024
    # Seconds of the episode's own time (generation once admitted, env, tools, reward); on
    # engines that report admission (hf), time waiting for an engine slot is not counted.
    episode_timeout_s: float = 120.0
    # The absolute bound on an episode's wall time, the engine queue included, as a multiple
    # of episode_timeout_s: a wedged engine that never admits still ends it as "timeout".
    episode_wall_factor: float = 8.0
    # Episodes in flight at once.
    concurrency: int = 64
    # Tool-call text format: hermes (<tool_call>JSON</tool_call>), llama3 (bare JSON), auto.
    tool_format: Literal["auto", "hermes", "llama3"] = "auto"
    # This many invalid tool calls in a row (unparsable, unknown tool, arguments off the
    # schema; a valid call resets the count) end the episode as termination
    # "invalid_tool_calls", a policy outcome (trained on). null = no limit (the default: the
    # model may learn from the error results); 3 stops a policy looping on bad calls early.
    max_invalid_tool_calls: int | None = None
    # Run an agent program instead of the built-in env loop (`agentrl train --agent m:fn`).
    harness: HarnessConfig = field(default_factory=HarnessConfig)


@dataclass(kw_only=True)
class DataConfig:
    # Env id (see `agentrl envs list`); tasks come from env.reset(seed).
    env: str = "math/calc-easy-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    # User env files (like `--env-module`, which appends here) imported in every process that
    # builds envs: the driver, torchrun ranks and Ray rollout workers.
    env_modules: list[str] = field(default_factory=list)
    # A dataset whose rows pose the training episodes (docs/datasets.md): parquet, JSONL
    # (.jsonl/.json, optionally .gz) or a HF `datasets` save_to_disk folder (agentrl[datasets]).
    # Empty = the env generates tasks from seeds. data.env must take rows (config error if not).
    path: str = ""
    # Several such files, read in order as one dataset (verl's name); instead of `path`.
    train_files: list[str] = field(default_factory=list)
    # Validation split for the held-out eval (a file/folder or a list): its first
    # `eval_episodes` rows, greedy. Without it, a run on dataset rows has no held-out eval.
    val_path: str | list[str] = ""
    # Row field -> column (dotted for nested columns) for layouts other than verl's, e.g.
    # {question: problem, answer: solution}. Fields: prompt, question, answer, data_source,
    # extra_info, and the env's own (`row_fields`).
    columns: dict[str, str] = field(default_factory=dict)
    # A bad row (missing column, wrong type, invalid JSON): "error" stops at load naming the
    # file, row and column; "skip" leaves it out, and the count is logged.
    on_bad_row: Literal["error", "skip"] = "error"
    # Prompts per training step (each sampled rollout.n times).
    batch_size: int = 8
    # Held-out evaluation seeds start here (training seeds count up from 0).
    eval_seed_offset: int = 1_000_000
    eval_episodes: int = 64

    def train_paths(self) -> list[str]:
        return ([self.path] if self.path else []) + list(self.train_files)

    def val_paths(self) -> list[str]:
        if isinstance(self.val_path, str):
            return [self.val_path] if self.val_path else []
        return list(self.val_path)

    def __post_init__(self) -> None:
        """Dataset keys need an env that takes rows: checked here, when the config loads."""
        if self.path and self.train_files:
            raise ValueError("data.path and data.train_files are both set; use one of them")
        if self.columns and not (self.train_paths() or self.val_paths()):
            raise ValueError("data.columns is set but no dataset is (data.path/train_files)")
        if self.train_paths() or self.val_paths():
            from agentrl.envs import load_env_module
            from agentrl.rows import check_columns, rows_env

            for module in self.env_modules:
                load_env_module(module)
            check_columns(self.columns, rows_env(self.env))


@dataclass(kw_only=True)
class KLConfig:
    coef: float = 0.0
    # k1 (unbiased, signed), abs, k2/mse (½d²), k3/low_var_kl (unbiased, ≥ 0, clamped).
    estimator: Literal["k1", "abs", "k2", "mse", "k3", "low_var_kl"] = "low_var_kl"
    # "loss": KL term in the policy loss (GRPO); "reward": penalty folded into rewards (PPO).
    placement: Literal["loss", "reward"] = "loss"
    # "fixed": `coef` throughout. "adaptive" (Ziegler et al. 2019, verl's kl_ctrl): after each
    # step coef *= 1 + clip(KL/target_kl − 1, ±0.2)·batch_size/horizon, starting from `coef`.
    ctrl: Literal["fixed", "adaptive"] = "fixed"
    target_kl: float = 0.1
    horizon: int = 10000


@dataclass(kw_only=True)
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    policy_loss: str = "ppo_clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    # Dual-clip constant c (>1) bounding the loss for negative advantages; 0 disables.
    dual_clip_c: float = 0.0
    loss_agg_mode: Literal[
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ] = "token-mean"
    entropy_coef: float = 0.0
    norm_adv_by_std: bool = True
    gamma: float = 1.0
    lam: float = 1.0
    # Credit per turn: "episode" broadcasts the final reward; "turn" uses per-turn rewards.
    credit: Literal["episode", "turn"] = "episode"
    kl: KLConfig = field(default_factory=KLConfig)
    value_clip: float = 0.2
    # DAPO dynamic sampling: drop groups whose rewards all match, resample up to N batches.
    dynamic_sampling: bool = False
    max_resample_batches: int = 3
    # DAPO overlong shaping: linear penalty over the last `overlong_buffer` tokens.
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    # Rollout/train mismatch correction with the engine's logprobs.
    tis_mode: Literal["none", "token", "sequence", "token_mask", "sequence_mask"] = "none"
    tis_cap: float = 2.0
    # Off-policy PPO (docs/algorithms.md "Off-policy PPO"; agentrl/algorithms/offpolicy.py).
    # "standard": clip π_θ/π_old, tis_mode corrects π_rollout → π_old. "decoupled" (AReaL):
    # clip π_θ/π_old (the proximal policy) and weight each token by π_old/π_rollout, zeroing
    # tokens whose weight exceeds behav_weight_cap (0 = no cap). "bypass": clip π_θ/π_rollout,
    # no old-log-prob forward. decoupled and bypass replace tis_mode (keep it none).
    off_policy: Literal["standard", "decoupled", "bypass"] = "standard"
    behav_weight_cap: float = 5.0
    # Rejection masks on ρ = π_old/π_rollout, left out of the loss and its denominator.
    # "token" (IcePop): tokens with ρ outside [low, high]; "geometric": sequences whose
    # geometric mean of ρ is outside it (typical high 1.001). low 0 = 1/high.
    rollout_mask: Literal["none", "token", "geometric"] = "none"
    rollout_mask_low: float = 0.0
    rollout_mask_high: float = 2.0
    # seq-mean-token-sum-norm's divisor (Dr.GRPO's constant generation budget); 0 = the
    # longest response of the step's batch.
    loss_scale_factor: int = 0
    # Whiten advantages over the batch's trained tokens (mean 0, unbiased std 1) after the
    # estimator. None = verl's choice per estimator: on for gae, off for the rest
    # (reinforce_plus_plus* whiten as part of their definition).
    whiten_advantages: bool | None = None
    # sapo: gate temperatures for A > 0 / A ≤ 0 (verl's actor.tau_pos / tau_neg).
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    # clip_cov: share of trained tokens whose gradient is dropped, and the covariance window.
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    # kl_cov: share of trained tokens (highest covariance) that get the |log r| penalty.
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    # optimal_token_baseline: zero the baseline where a group's longest response runs past
    # its second longest (verl's handle_zero_tail).
    otb_zero_tail: bool = True

    def __post_init__(self) -> None:
        """Off-policy keys that cannot mean anything together: one error naming them."""
        if self.off_policy != "standard" and self.tis_mode != "none":
            raise ValueError(
                f"algorithm.tis_mode: {self.tis_mode} with algorithm.off_policy: "
                f"{self.off_policy}, which replaces it (decoupled weights by π_old/π_rollout; "
                "bypass has no π_old); set tis_mode: none"
            )
        if self.off_policy == "bypass" and self.rollout_mask != "none":
            raise ValueError(
                f"algorithm.rollout_mask: {self.rollout_mask} compares π_old with π_rollout, "
                "and algorithm.off_policy: bypass computes no π_old; use off_policy: decoupled"
            )
        if 0 < self.behav_weight_cap <= 1 or self.behav_weight_cap < 0:
            raise ValueError(
                f"algorithm.behav_weight_cap must be > 1 (0: no cap), got {self.behav_weight_cap}"
            )
        lo, hi = self.rollout_mask_low, self.rollout_mask_high
        if self.rollout_mask != "none" and not (hi > 1 and 0 <= lo < 1):
            raise ValueError(
                f"algorithm.rollout_mask_low/high [{lo}, {hi}] must hold 1: "
                "0 <= low < 1 < high (low 0 = 1/high)"
            )


@dataclass(kw_only=True)
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    grad_clip: float = 1.0
    scheduler: Literal["constant", "cosine"] = "constant"


@dataclass(kw_only=True)
class SFTConfig:
    # Bootstrap with supervised steps on oracle demonstrations before RL (0 = skip).
    steps: int = 0
    batch_size: int = 16
    lr: float = 1e-3
    demos: int = 256
    # Fraction of demos in which the teacher answers straight away instead of calling tools:
    # an imperfect teacher, as instruction-tuned models often are. RL then has to discover that
    # calling the tool pays. 0 = always the oracle's full tool-using episode.
    skip_tools: float = 0.0


@dataclass(kw_only=True)
class AsyncConfig:
    """`trainer.async`: pipelined, partially asynchronous steps (docs/async.md)."""

    # 0: the synchronous loop (rollout, then update). K >= 1: the next batch's episodes run
    # while the current batch trains; a trained token is at most K weight versions behind the
    # policy being updated, and a group never spans more than K + 1 versions.
    max_staleness: int = 0
    # K >= 1: prompts kept in flight, in batches (data.batch_size prompts each); 0 = K + 1.
    prefetch_batches: int = 0
    # K >= 1: how a trained group is kept within K versions (docs/async.md, "Staleness
    # policies"). "pace": a prompt is issued only while the prompts issued and not dropped
    # stay within (version + K + 1) batches (AReaL's capacity rule); a group that still
    # finishes more than K behind is dropped and its prompt issued again first. "drop": no
    # such admission; a group more than K behind is discarded and its prompt is not run
    # again. "wait": pace's admission, and a step waits for every group issued K versions ago
    # instead of training past it, so nothing is ever dropped. "pace" is the default because
    # it keeps the earlier behaviour (drop and re-issue) and is identical to it while
    # prefetch_batches <= K + 1 (the default); deeper prefetch is throttled to K + 1 batches
    # instead of issuing prompts only to drop them.
    staleness: Literal["drop", "wait", "pace"] = "pace"
    # K >= 1: how long a step waits for its batch of finished groups before failing with a
    # clear error (an episode has its own rollout.episode_timeout_s).
    batch_timeout_s: float = 1800.0
    # Where the rollout (engine + env episodes) runs. "thread": in the trainer's process, its
    # event loop on a thread. "process": a child process of its own (spawned; same device;
    # weights through one shared staging copy, CUDA IPC on GPU), so decoding and the update
    # do not share one interpreter's GIL. Any K (K = 0 with "process" still alternates
    # phases). Single-process local placement only; envs registered by your own script must
    # come from `data.env_modules` (the child imports them; it never sees __main__).
    producer: Literal["thread", "process"] = "thread"
    # "process": seconds the child may take to start (load the model, build the engine), and
    # the bound on any one call into it (a collect, an evaluation, a weight sync).
    producer_timeout_s: float = 1800.0


@dataclass(kw_only=True)
class TrainerConfig:
    steps: int = 10
    ppo_epochs: int = 1
    # Trajectories per optimizer step; the batch is split into mini-batches.
    mini_batch_size: int = 32
    # Trajectories per forward/backward (gradient accumulation inside a mini-batch).
    micro_batch_size: int = 8
    logprob_micro_batch_size: int = 16
    # When the update is one on-policy pass (ppo_epochs 1, one mini-batch) and nothing needs
    # them earlier (TIS, KL in reward, a rollout dump), the old log-probs are the update
    # forward's own, detached (ratio 1), so the separate forward is skipped, as TRL does.
    # The rollout/trainer mismatch (`rollout_kl`) is then logged from the update.
    reuse_on_policy_log_probs: bool = True
    backend: Literal["torch", "fsdp2", "megatron"] = "torch"
    # Padding-free packing: each micro-batch's sequences are laid end to end in one row with
    # per-sequence positions; attention stays inside each sequence (varlen flash attention on
    # CUDA). No compute is spent on padding. Not for sliding-window/soft-capped attention
    # (Gemma-2) or multimodal batches (a clear error says so).
    packing: bool = False
    # Ulysses sequence parallelism (needs packing and backend=fsdp2 under torchrun): groups of
    # this many ranks split each packed micro-batch along the sequence and exchange attention
    # heads by all-to-all, dividing activation memory per rank. Must divide the world size
    # and the attention head count.
    ulysses_sp: int = 1
    # Offload between phases (verl's param_offload / optimizer_offload): the actor's (and
    # reference's, critic's) parameters / optimizer state wait in CPU memory while the rollout
    # runs, leaving the GPU to the engine; copied back for log-probs and the update.
    param_offload: bool = False
    optimizer_offload: bool = False
    # fsdp2 only: FSDP2's CPUOffloadPolicy. Parameters, gradients and optimizer state stay in
    # CPU memory throughout; each layer is copied to the GPU when used; Adam steps on the CPU.
    # The largest model per GPU, at the cost of update speed.
    fsdp_offload_policy: bool = False
    # torch.compile each decoder layer of the trained model (dynamic shapes, one graph for
    # all layers; packed attention stays eager between two graphs) and the float32
    # log-softmax/entropy chunks: fuses the elementwise work around the matmuls. The first
    # update (and the first log-prob pass) pays the compile time; GPU recommended.
    compile: bool = False
    # How the trainer's forwards turn hidden states into log-probs and entropies. fused: the
    # lm-head product and the float32 log-softmax/entropy run together in row chunks,
    # recomputed in backward, so no [tokens, vocab] logits or their gradient are held for a
    # micro-batch (agentrl/trainer/fused_head.py). materialized: the lm-head's logits are kept
    # for backward. Same values up to float rounding order. Models without a plain lm-head (a
    # bias, a LoRA on it, Megatron) and FSDP2-sharded ones run materialized. A memory lever
    # for users (docs/troubleshooting.md, out of memory), not a speed knob: it trades one more
    # lm-head product for ~2 GB less peak per 3.5k response tokens of a 150k vocabulary in
    # bf16, which grows with response length; no faster (H200: 1.03x, CPU: 0.99x;
    # benchmarks/notes/update.md), hence not the default.
    update_path: Literal["fused", "materialized"] = "materialized"
    # local: every role in this process (or one process per rank under torchrun).
    # ray: rollout and learner run as Ray actors (see docs/scaling.md).
    placement: Literal["local", "ray"] = "local"
    # placement=ray: rollout and learner share one resource bundle (time-sliced GPU) or get
    # their own (split: generation and training on separate GPUs/nodes).
    colocate: bool = True
    nnodes: int = 1
    n_gpus_per_node: int = 0
    device: str = "auto"
    seed: int = 0
    # Run folder. "{env}" is replaced by data.env (slashes -> dashes); a folder holding a
    # previous run is never reused silently: the default template takes the next free
    # numbered folder (runs/math-calc-easy-v0-2, ...), an explicit path is refused unless
    # `agentrl train --resume` / `--overwrite` (see agentrl/trainer/run_dir.py).
    out_dir: str = "runs/{env}"
    save_every: int = 0
    # Beside each checkpoint's resumable state, and as `final/` at the end: an HF directory
    # (merged weights, tokenizer, chat template; plus `adapter/` for LoRA) anyone can load.
    save_hf: bool = True
    eval_every: int = 0
    # Every N steps, write that step's trajectories (with the trainer's per-token log-probs)
    # to out_dir/rollouts/step_N.jsonl for `agentrl view`; 0 = never.
    dump_rollouts_every: int = 0
    tensorboard: bool = True
    wandb: bool = False
    # Torch intra-op threads; 0 = auto: on CPU the cores idle at start (busy cores make every
    # extra thread a stall), on CUDA one (a pool's workers delay the kernel launches); see
    # agentrl/trainer/threads.py.
    cpu_threads: int = 0
    # Python's full garbage collections at step boundaries: the heap frozen after the first
    # step (the automatic passes inside a step then skip the compilers' long-lived objects),
    # one full collection every N steps (agentrl/trainer/gc_control.py); 0 = Python's own
    # schedule.
    gc_every: int = 50
    # Wall-clock budget in seconds, counted from the start of the run (model and engine build,
    # untouched eval and SFT included); 0 = off. Once spent, no new RL step starts (one
    # always runs): the step in flight finishes, then the final held-out eval, checkpoint,
    # `final/` export and summary run as after the last step, and one line says the run
    # stopped on budget at step N. Leave room for the final eval. For fixed-time runs on a
    # shared machine (benchmarks/gpu_matrix.py).
    max_wall_s: float = 0.0
    # YAML `trainer.async` (`async` is a Python keyword, hence the field's name).
    async_: AsyncConfig = field(default_factory=AsyncConfig, metadata={"yaml": "async"})


@dataclass(kw_only=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
