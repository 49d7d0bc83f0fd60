"""`agentrl config import-verl`: verl YAML → validated agentrl config + every unmapped key."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from verl_grpo_fixture import VERL_GRPO_MULTITURN

from agentrl.cli import main
from agentrl.compat.verl import META, flatten, import_verl
from agentrl.config import TrainConfig, from_dict, load_config


def test_multiturn_grpo_maps_what_decides_training() -> None:
    r = import_verl(yaml.safe_load(VERL_GRPO_MULTITURN), env="math/calc-v0")
    cfg = from_dict(TrainConfig, r.config)
    assert (cfg.data.env, cfg.data.path, cfg.data.batch_size) == (
        "math/calc-v0",
        "/data/gsm8k/train.parquet",
        256,
    )
    # verl's ppo_mini_batch_size counts prompts; agentrl's counts trajectories (× rollout.n).
    assert (cfg.rollout.n, cfg.trainer.mini_batch_size, cfg.trainer.micro_batch_size) == (8, 512, 8)
    assert cfg.trainer.logprob_micro_batch_size == 32
    assert (cfg.sampling.max_new_tokens, cfg.rollout.max_total_tokens) == (2048, 3072)
    assert (cfg.sampling.top_k, cfg.rollout.max_turns, cfg.rollout.tool_format) == (0, 5, "hermes")
    a = cfg.algorithm
    assert (a.adv_estimator, a.clip_low, a.clip_high, a.dual_clip_c) == ("grpo", 0.2, 0.28, 3.0)
    assert (a.kl.coef, a.kl.estimator, a.kl.placement) == (0.001, "low_var_kl", "loss")
    assert a.loss_agg_mode == "token-mean" and a.entropy_coef == 0.0
    lora = cfg.model.lora
    assert (lora.enabled, lora.r, lora.alpha, lora.target_modules) == (True, 32, 64, ["all-linear"])
    assert cfg.model.path == "/ckpt/Qwen2.5-3B-Instruct" and cfg.model.gradient_checkpointing
    assert (cfg.engine.kind, cfg.engine.gpu_memory_utilization) == ("sglang", 0.6)
    assert cfg.engine.extra == {"tp_size": 2}
    t = cfg.trainer
    assert (t.steps, t.n_gpus_per_node, t.nnodes, t.save_every, t.eval_every) == (200, 8, 1, 0, 20)
    assert t.out_dir == "checkpoints/gsm8k_async_rl/qwen2.5-3b_function_rm-gsm8k-sgl-multi-w-tool"
    assert (t.wandb, t.tensorboard, t.backend) == (True, False, "fsdp2")
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.scheduler) == (1e-6, 0.01, "constant")
    # Memory levers: remove_padding → packing; the ref's param_offload turns offload on.
    assert (t.packing, t.ulysses_sp, t.param_offload, t.optimizer_offload) == (True, 1, True, False)


def test_every_verl_key_is_mapped_reported_or_inactive() -> None:
    tree = yaml.safe_load(VERL_GRPO_MULTITURN)
    r = import_verl(tree, env="math/calc-v0")
    leaves = {k for k in flatten(tree) if not META.search(k)}
    buckets = [set(r.mapped), set(r.unmapped), set(r.inactive)]
    assert set().union(*buckets) == leaves
    assert sum(map(len, buckets)) == len(leaves)  # disjoint
    for key in (
        "actor_rollout_ref.actor.use_dynamic_bsz",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path",
        "trainer.critic_warmup",
    ):
        assert key in r.unmapped, key
    assert {"data.train_files", "data.val_files", "data.prompt_key"} <= set(r.mapped)
    assert "algorithm.kl_ctrl.kl_coef" in r.inactive  # use_kl_in_reward: false
    assert "critic.optim.lr" in r.inactive  # GRPO has no critic


def test_ppo_gae_kl_in_reward_and_dapo_keys(tmp_path: Path) -> None:
    rows = tmp_path / "train.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(40)))
    tree = {
        "data": {"train_files": [str(rows)], "train_batch_size": 8},
        "algorithm": {
            "adv_estimator": "gae",
            "lam": 0.95,
            "use_kl_in_reward": True,
            "kl_penalty": "k3+",
            "kl_ctrl": {"type": "adaptive", "kl_coef": 0.02, "target_kl": 0.1},
            "filter_groups": {"enable": True, "metric": "acc", "max_num_gen_batches": 0},
        },
        "actor_rollout_ref": {
            "actor": {
                "loss_agg_mode": "seq-mean-token-sum-norm",
                "policy_loss": {"loss_mode": "gspo"},
            },
            "rollout": {
                "name": "vllm",
                "n": 4,
                "multi_turn": {"enable": False, "max_assistant_turns": 3},
            },
        },
        "reward_model": {"overlong_buffer": {"enable": True, "len": 128, "penalty_factor": 0.5}},
        "critic": {"cliprange_value": 0.5, "optim": {"lr": 1e-5}},
        "trainer": {"total_epochs": 2, "logger": ["console", "mlflow"]},
    }
    r = import_verl(tree)
    cfg = from_dict(TrainConfig, r.config)
    a = cfg.algorithm
    assert (a.adv_estimator, a.lam, a.value_clip, a.policy_loss) == ("gae", 0.95, 0.5, "gspo")
    assert (a.kl.coef, a.kl.estimator, a.kl.placement) == (0.02, "k3", "reward")
    assert (a.kl.ctrl, a.kl.target_kl, a.kl.horizon) == ("adaptive", 0.1, 10000)  # verl's horizon
    assert (a.dynamic_sampling, a.max_resample_batches) == (True, 10)
    assert (a.overlong_buffer, a.overlong_penalty) == (128, 0.5)
    assert a.loss_agg_mode == "seq-mean-token-sum-norm" and a.loss_scale_factor == 0
    assert a.dual_clip_c == 3.0  # absent in the file: verl's default, verl always dual-clips
    assert any("clip_ratio_c absent" in n for n in r.notes)
    assert cfg.trainer.steps == 2 * (40 // 8)  # epochs × batches in the local dataset
    for key in ("critic.optim.lr", "trainer.logger"):
        assert key in r.unmapped, key
    for key in ("algorithm.kl_ctrl.type", "algorithm.kl_ctrl.target_kl"):
        assert key in r.mapped, key
    [warning] = r.warnings  # verl's gspo honours loss_agg_mode, agentrl's does not
    assert "gspo ignores loss_agg_mode" in warning and "seq-mean-token-sum-norm" in warning
    assert "actor_rollout_ref.rollout.multi_turn.max_assistant_turns" in r.inactive
    assert cfg.rollout.max_turns == 1  # multi_turn.enable: false is single-turn generation
    assert any("straight-through" in n for n in r.notes)


def test_cli_writes_a_validated_config_and_lists_unmapped_keys(tmp_path: Path, capsys) -> None:
    src, out = tmp_path / "verl.yaml", tmp_path / "agentrl.yaml"
    src.write_text(VERL_GRPO_MULTITURN)
    # Its `defaults: [ppo_trainer]` is verl's packaged file, not installed here: refused
    # unless --no-defaults (tests/cli/test_import_verl_first_hour.py composes one).
    argv = ["config", "import-verl", str(src), "--out", str(out), "--env", "math/calc-v0"]
    assert main(argv) == 2 and not out.exists()
    assert "defaults: cannot resolve 'ppo_trainer'" in capsys.readouterr().err
    assert main([*argv, "--no-defaults"]) == 0
    cfg = load_config(TrainConfig, out)
    assert cfg.rollout.n == 8 and cfg.data.env == "math/calc-v0"
    err = capsys.readouterr().err
    assert "unmapped verl keys" in err
    assert "actor_rollout_ref.actor.use_dynamic_bsz: no agentrl equivalent" in err
    assert "# Not mapped" in out.read_text()  # the file carries the report too


def test_cli_prints_to_stdout_without_out(tmp_path: Path, capsys) -> None:
    src = tmp_path / "verl.yaml"
    src.write_text("algorithm:\n  adv_estimator: rloo\nactor_rollout_ref:\n  rollout:\n    n: 4\n")
    assert main(["config", "import-verl", str(src)]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["algorithm"]["adv_estimator"] == "rloo" and printed["rollout"]["n"] == 4


def test_new_estimators_losses_and_their_knobs_map() -> None:
    tree = {
        "data": {"max_response_length": 1024},
        "algorithm": {"adv_estimator": "optimal_token_baseline"},
        "actor_rollout_ref": {
            "actor": {
                "loss_agg_mode": "seq-mean-token-sum-norm",
                "clip_ratio_c": 10.0,
                "calculate_sum_pi_squared": True,
                "tau_pos": 1.5,
                "tau_neg": 2.0,
                "policy_loss": {
                    "loss_mode": "clip_cov",
                    "clip_cov_ratio": 0.001,
                    "clip_cov_lb": 0.5,
                    "clip_cov_ub": 4.0,
                    "kl_cov_ratio": 0.002,
                    "ppo_kl_coef": 0.5,
                },
            }
        },
    }
    r = import_verl(tree)
    a = from_dict(TrainConfig, r.config).algorithm
    assert (a.adv_estimator, a.policy_loss, a.dual_clip_c) == (
        "optimal_token_baseline",
        "clip_cov",
        10.0,
    )
    assert (a.loss_agg_mode, a.loss_scale_factor) == ("seq-mean-token-sum-norm", 1024)
    assert (a.tau_pos, a.tau_neg) == (1.5, 2.0)
    assert (a.clip_cov_ratio, a.clip_cov_lb, a.clip_cov_ub) == (0.001, 0.5, 4.0)
    assert (a.kl_cov_ratio, a.ppo_kl_coef) == (0.002, 0.5)
    assert not r.unmapped and not r.warnings
    for est in ("grpo_passk", "gpg", "tir_optimal_token_baseline"):
        got = import_verl({"algorithm": {"adv_estimator": est}}).config["algorithm"]
        assert got["adv_estimator"] == est.removeprefix("tir_")
    for mode in ("sapo", "gpg", "kl_cov", "geo_mean"):
        t = {"actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": mode}}}}
        assert import_verl(t).config["algorithm"]["policy_loss"] == mode
    t = {"actor_rollout_ref": {"actor": {"loss_agg_mode": "token-sum"}}}
    assert import_verl(t).config["algorithm"]["loss_agg_mode"] == "token-sum"


def test_data_keys_map_onto_the_row_contract(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(name: str, source: str, n: int) -> str:
        rows = [{"data_source": source, "q": [{"role": "user", "content": "x"}]}] * n
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / name)
        return str(tmp_path / name)

    a, b = parquet("a.parquet", "codecontests", 6), parquet("b.parquet", "codecontests", 2)
    val = [parquet("v1.parquet", "codecontests", 3), parquet("v2.parquet", "codecontests", 4)]
    tree = {"data": {"train_files": [a, b], "val_files": val, "prompt_key": "q"}}
    r = import_verl(tree)
    cfg = from_dict(TrainConfig, r.config)
    d = cfg.data
    assert (d.path, d.train_files, d.val_path) == ("", [a, b], val)
    assert (d.columns, d.eval_episodes, d.env) == ({"prompt": "q"}, 7, "code/functions-v0")
    assert any("data_source is 'codecontests'" in n for n in r.notes)
    search = import_verl({"data": {"train_files": parquet("s.parquet", "searchR1_nq", 1)}})
    assert search.config["data"]["env"] == "search/qa-v0"
    assert any("retriever_url" in n for n in search.notes)
    gone = import_verl({"data": {"train_files": "/nowhere/train.parquet"}}, env="math/calc-v0")
    assert gone.config["data"] == {"path": "/nowhere/train.parquet", "env": "math/calc-v0"}
