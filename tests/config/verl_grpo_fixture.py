"""A realistic verl multi-turn GRPO config (the shape of verl's gsm8k tool-agent examples)."""

VERL_GRPO_MULTITURN = """
hydra:
  searchpath:
    - file://verl/trainer/config
defaults:
  - ppo_trainer
  - _self_
data:
  tokenizer: null
  train_files: /data/gsm8k/train.parquet
  val_files: /data/gsm8k/test.parquet
  prompt_key: prompt
  max_prompt_length: 1024
  max_response_length: 2048
  train_batch_size: 256
  return_raw_chat: true
  shuffle: true
  filter_overlong_prompts: true
  truncation: error
actor_rollout_ref:
  hybrid_engine: true
  model:
    path: /ckpt/Qwen2.5-3B-Instruct
    lora_rank: 32
    lora_alpha: 64
    target_modules: all-linear
    enable_gradient_checkpointing: true
    use_remove_padding: true
  actor:
    strategy: fsdp2
    optim:
      lr: 1.0e-06
      lr_warmup_steps_ratio: 0.0
      weight_decay: 0.01
      warmup_style: constant
    ppo_mini_batch_size: 64
    ppo_micro_batch_size_per_gpu: 8
    use_dynamic_bsz: false
    ppo_epochs: 1
    clip_ratio: 0.2
    clip_ratio_low: 0.2
    clip_ratio_high: 0.28
    clip_ratio_c: 3.0
    loss_agg_mode: token-mean
    entropy_coeff: 0
    use_kl_loss: true
    kl_loss_coef: 0.001
    kl_loss_type: low_var_kl
    ulysses_sequence_parallel_size: 1
    fsdp_config:
      param_offload: false
      optimizer_offload: false
  ref:
    log_prob_micro_batch_size_per_gpu: 16
    fsdp_config:
      param_offload: true
  rollout:
    name: sglang
    mode: async
    n: 8
    temperature: 1.0
    top_p: 1.0
    top_k: -1
    prompt_length: ${data.max_prompt_length}
    response_length: ${data.max_response_length}
    gpu_memory_utilization: 0.6
    tensor_model_parallel_size: 2
    log_prob_micro_batch_size_per_gpu: 32
    enforce_eager: false
    multi_turn:
      enable: true
      max_assistant_turns: 5
      max_user_turns: 5
      format: hermes
      tool_config_path: examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml
algorithm:
  adv_estimator: grpo
  norm_adv_by_std_in_grpo: true
  use_kl_in_reward: false
  kl_penalty: kl
  kl_ctrl:
    type: fixed
    kl_coef: 0.001
  gamma: 1.0
  lam: 1.0
reward_model:
  enable: false
  reward_manager: naive
custom_reward_function:
  path: null
  name: compute_score
critic:
  optim:
    lr: 1.0e-05
trainer:
  critic_warmup: 0
  logger: ["console", "wandb"]
  project_name: gsm8k_async_rl
  experiment_name: qwen2.5-3b_function_rm-gsm8k-sgl-multi-w-tool
  n_gpus_per_node: 8
  nnodes: 1
  save_freq: -1
  test_freq: 20
  total_training_steps: 200
  total_epochs: 15
  default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}
  resume_mode: auto
  val_before_train: true
"""
