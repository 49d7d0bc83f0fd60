"""The RL training loop. `Trainer.train()` reads top to bottom:

collect → reward → old/ref log-probs → advantages → mini-batch updates → weight sync → log →
checkpoint. Roles (Actor, Reference, Critic, Rollout, RewardScorer) are separate objects that
`agentrl.assembly` builds from the config and hands over as `Components`, with the `Collector`
that gathers each step's groups (`collect.py`); the loop only composes them, through their
Protocols, and runs the same way whichever collector it is given.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from agentrl.algorithms import (
    AdvantageInput,
    KLController,
    compute_advantages,
    get_estimator,
    importance_weights,
    ratio_spread,
)
from agentrl.config import TrainConfig, to_dict
from agentrl.report.metrics import UNTOUCHED_FILE
from agentrl.report.progress import RunProgress
from agentrl.rollout.runner import env_error_line
from agentrl.types import TrajectoryGroup

from . import run_dir
from .actor import Actor, old_forward_needed
from .batch import TrainBatch
from .checkpoint import Checkpointer
from .collect import Collector, HeldOutEval
from .components import ActorRole, Components
from .empty_step import check_generated
from .exclusion import exclude_infra_failures
from .export import FINAL_DIR, HF_DIR, export_hf, write_config
from .gc_control import GcSchedule
from .logger import MetricsLogger, held_out_summary
from .step_record import dump_rollouts, dumps_at, rollout_metrics, span_metrics


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        components: Components,
        collector: Collector,
        kl_ctrl: KLController | None = None,
    ) -> None:
        """`components`: every role, and `collector`: how each step's groups are gathered,
        both built by `agentrl.assembly` (`build_trainer(cfg)` makes all three). `kl_ctrl`:
        the KL coefficient of each step (`algorithm.kl.ctrl`), checkpointed; default built
        from `cfg`."""
        self.cfg = cfg
        self.c = components
        self.collector = collector
        self.t_init = components.started_at
        self.kl_ctrl = kl_ctrl or KLController.from_config(cfg.algorithm.kl)
        self.actor: ActorRole = self.c.actor
        self.out = run_dir.expand(cfg.trainer.out_dir, cfg.data.env)
        main = self.c.backend.is_main
        self.logger = MetricsLogger(
            self.out,
            tensorboard=cfg.trainer.tensorboard,
            wandb=cfg.trainer.wandb,
            config=to_dict(cfg),
            enabled=main,
        )
        self.progress = RunProgress(self.logger.console, enabled=main)
        self.checkpointer = Checkpointer(self.out)
        self.step = 0
        self.session = False  # whether this process started a session in `run.json`
        # The estimator's registry entry says what it reads beyond rewards: a greedy episode per
        # prompt as baseline (ReMax), Σπ² per position (optimal token baseline).
        estimator = get_estimator(cfg.algorithm.adv_estimator)
        self.greedy_baseline = estimator.greedy_baseline
        self.group_relative = estimator.group_relative  # infra exclusion's group-drop rule
        self.sum_pi_squared = estimator.sum_pi_squared
        self.generator = torch.Generator().manual_seed(cfg.trainer.seed)
        self.gc = GcSchedule(cfg.trainer.gc_every)  # full collections between steps only

    # ------------------------------------------------------------------ the loop
    def train(self, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
        """Run (or, with `resume`, continue) training in `trainer.out_dir`. A folder holding a
        previous run is refused unless `resume` or `overwrite` (see `run_dir`). Whatever
        happens (a step that raises, Ctrl-C), the engine, workers and backend are closed."""
        try:
            return self.run(resume, overwrite)
        finally:
            self.finish()

    def run(self, resume: bool, overwrite: bool) -> dict[str, Any]:
        """The run itself; `train` wraps it so that the components are always closed."""
        main, tcfg = self.c.backend.is_main, self.cfg.trainer
        run_dir.claim(self.out, resume=resume, overwrite=overwrite, dry_run=not main)
        self.c.backend.barrier()
        if main:  # the folder is ours now: config.yaml and the session go in
            write_config(self.cfg, self.out)
            run_dir.start_session(self.out, self.t_init, time.time() - self.t_init)
            self.session = True
        resumed = resume and self.load_checkpoint()
        if main:
            for line in self.c.data.describe():
                self.logger.console.print(line)
        if not resumed and self.cfg.sft.steps:
            self.evaluate("untouched")  # the model as loaded: what SFT and RL each add
            self.bootstrap_sft()
        if not resumed:
            self.evaluate("before")
        saved = self.step if resumed else None
        self.collector.start(self.step)
        for note in self.collector.notes if main else ():
            self.logger.console.print(f"[yellow]{note}[/]")
        with self.progress.task("train", tcfg.steps, transient=False) as bar:
            bar.advance(self.step)
            first = self.step
            while self.step < tcfg.steps:
                if self.step > first and self.over_budget():  # one step always runs
                    break
                self.step += 1
                t0 = time.perf_counter()
                metrics = self.train_step()
                metrics["time/step"] = time.perf_counter() - t0
                metrics |= span_metrics(metrics)
                if (gc_s := self.gc.after_step(self.step)) is not None:
                    metrics["time/gc"] = gc_s
                self.logger.log(self.step, metrics)
                if tcfg.save_every and self.step % tcfg.save_every == 0:
                    self.save_checkpoint()
                    saved = self.step
                # The last step's eval is the "after" one below, not a second one here.
                if tcfg.eval_every and self.step % tcfg.eval_every == 0 and self.step < tcfg.steps:
                    self.evaluate("eval")
                bar.advance(status=f"reward {metrics.get('reward/mean', 0.0):.3f}")
        self.collector.close()  # what it left pending is in the last checkpoint
        result = self.evaluate("after")
        if saved != self.step and (self.step or self.cfg.sft.steps):
            self.save_checkpoint()  # always end with one: a short run's model is not lost
        self.report_held_out(result)
        self.export_final()
        return result

    def over_budget(self) -> bool:
        """`trainer.max_wall_s` spent (counted from the components' build): the loop starts
        no new step and the run ends as after its last one (final eval, checkpoint, export);
        one line says so."""
        budget = self.cfg.trainer.max_wall_s
        if not budget:
            return False
        # Every rank decides alike (any rank's clock past the budget stops them all).
        if not self.c.backend.global_sum(float(time.time() - self.t_init >= budget)):
            return False
        if self.c.backend.is_main:
            self.logger.console.print(
                f"[yellow]stopped on budget at step {self.step} of {self.cfg.trainer.steps}: "
                f"trainer.max_wall_s={budget:g} spent[/]"
            )
        return True

    def train_step(self) -> dict[str, float]:
        c = self.c
        m: dict[str, float] = {}
        groups, m["time/rollout"] = self.timed(
            lambda: self.collector.next_batch(self.step, self.progress)
        )
        if c.backend.is_main and (warning := env_error_line(groups)):
            self.logger.console.print(warning, style="yellow", markup=False, highlight=False)
        c.rollout.offload()  # engine.sleep_between_phases: the engine frees the GPU until reused
        rcfg = self.cfg.rollout
        check_generated(groups, self.step, rcfg.max_total_tokens, self.cfg.sampling.max_new_tokens)
        split = exclude_infra_failures(groups, group_relative=self.group_relative)
        m |= split.metrics | {
            k: v for k, v in self.collector.stats.items() if k.startswith("span/")
        }
        if not split.groups:  # every group failed for infrastructure reasons: no update
            self.dump(split.groups, None, split.left_out)
            return m
        groups = split.groups
        batch = c.scorer.batch(groups)
        t0 = time.perf_counter()
        if self.needs_old_log_probs(batch):
            batch.old_log_probs = self.actor.compute_log_probs(batch)
        m |= self.collector.lag_metrics(batch)
        kl_coef = self.kl_ctrl.value
        if c.reference is not None:
            batch.ref_log_probs = c.reference.compute_log_probs(batch)
            m |= c.scorer.kl_in_reward(batch, batch.old_log_probs, batch.ref_log_probs, kl_coef)
        if c.critic is not None:
            batch.values = c.critic.compute_values(batch)
        sum_pi_sq = self.actor.compute_sum_pi_squared(batch) if self.sum_pi_squared else None
        m["time/logprobs"] = time.perf_counter() - t0
        self.dump(groups, batch, split.left_out)
        baseline = None
        if self.greedy_baseline:
            baseline = c.scorer.baseline_rewards(groups)
            m["remax/baseline_reward"] = float(baseline.mean())
        m |= self.advantages(batch, baseline, sum_pi_sq)
        actor_metrics, m["time/update"] = self.timed(
            lambda: self.actor.update(batch, self.generator, kl_coef)
        )
        # π_old/π_rollout where the update computed π_old: the collector logs it if its groups lag
        spread = ratio_spread(actor_metrics)
        m |= actor_metrics
        m |= self.update_kl_coef(kl_coef, m, batch.size)
        if c.critic is not None:
            m |= c.critic.update(batch)
        m["time/weight_sync"] = c.rollout.sync_weights(self.actor.named_weights())
        m["data/cursor"] = float(c.data.cursor)  # prompts consumed: resume continues here
        if c.data.skipped:
            m["data/skipped_rows"] = float(c.data.skipped)
        m |= self.collector.metrics(self.step, groups, spread)
        return m | rollout_metrics(groups, batch, self.collector.stats, c.success_at)

    # ------------------------------------------------------------------ pieces
    def dump(self, groups: list[TrajectoryGroup], batch: TrainBatch | None, left_out: Any) -> None:
        """The step's rollouts for `agentrl view` on a `trainer.dump_rollouts_every` step,
        the episodes left out of training (`exclusion`) included."""
        if dumps_at(self.step, self.cfg.trainer.dump_rollouts_every) and self.c.backend.is_main:
            tokenizer = self.cfg.model.tokenizer or self.cfg.model.path
            dump_rollouts(self.out, self.step, groups, batch, tokenizer, left_out)

    def update_kl_coef(self, used: float, m: dict[str, float], n: int) -> dict[str, float]:
        """Move the KL coefficient after a step that used `used`, from the step's measured KL
        (`kl_seq_mean`: of the reward penalty, or of the loss term); logs `kl/coef`."""
        if self.c.reference is None:
            return {}
        measured = m.get("kl_seq_mean")
        if measured is not None:
            self.kl_ctrl.update(measured, n)
        return {"kl/coef": used}

    def advantages(
        self,
        batch: TrainBatch,
        baseline_rewards: torch.Tensor | None = None,
        sum_pi_squared: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Rollout-correction weights, then advantages/returns onto `batch`.

        `baseline_rewards` `[B]`: the greedy reward of each row's prompt, for `greedy_baseline`
        estimators (ReMax). `sum_pi_squared` `[B, T]`: Σπ² per position, for `sum_pi_squared`
        estimators (the optimal token baseline, which also reads the correction weights).
        """
        algo = self.cfg.algorithm
        m: dict[str, Any] = {}
        weights = tis = None
        if batch.old_log_probs is not None:
            weights, tis = importance_weights(
                batch.old_log_probs,
                batch.rollout_log_probs,
                batch.response_mask,
                algo.tis_mode,
                algo.tis_cap,
            )
        inp = AdvantageInput(
            token_rewards=batch.token_rewards,
            mask=batch.response_mask,
            group_index=batch.group_index,
            episode_index=batch.episode_index,
            values=batch.values,
            old_log_probs=batch.old_log_probs,
            ref_log_probs=batch.ref_log_probs,
            baseline_rewards=baseline_rewards,
            turn_index=batch.turn_index,
            sum_pi_squared=sum_pi_squared,
            is_weights=weights if algo.tis_mode != "none" else None,
        )
        batch.advantages, batch.returns = compute_advantages(inp, algo)
        if weights is None or tis is None:  # one on-policy pass: the update logs the mismatch
            return m | self._mean_advantage(batch)
        if algo.tis_mode != "none":
            batch.is_weights = weights
            if algo.tis_mode.endswith("_mask"):
                batch.response_mask = batch.response_mask * (weights > 0)
        m |= tis
        return m | self._mean_advantage(batch)

    @staticmethod
    def _mean_advantage(batch: TrainBatch) -> dict[str, float]:
        assert batch.advantages is not None
        mask = batch.response_mask
        return {"advantage/mean": float((batch.advantages * mask).sum() / mask.sum().clamp(min=1))}

    def needs_old_log_probs(self, batch: TrainBatch) -> bool:
        """Whether to run the separate old-log-prob forward: when the update needs it
        (`old_forward_needed`: not for one on-policy pass, as TRL, nor under
        `off_policy: bypass`), or a KL reward, a rollout dump this step or the optimal
        token baseline reads π_old."""
        cfg = self.cfg
        return (
            old_forward_needed(cfg.algorithm, cfg.trainer, batch.size)
            or (self.c.reference is not None and cfg.algorithm.kl.placement == "reward")
            or dumps_at(self.step, cfg.trainer.dump_rollouts_every)
            or self.sum_pi_squared  # the optimal token baseline reads π_old
        )

    def evaluate(self, tag: str) -> dict[str, float]:
        items = self.c.data.eval_items() if self.cfg.data.eval_episodes > 0 else []
        if not items:  # eval off, or dataset rows without a validation split
            return {}
        t0 = time.perf_counter()
        # An agent program's collector evaluates through the same program (`HeldOutEval`).
        held_out = self.collector if isinstance(self.collector, HeldOutEval) else self.c.rollout
        with self.progress.task(f"eval ({tag})", len(items)) as bar:
            res = held_out.evaluate(items, self.c.success_at, self.progress.callback(bar))
        # Logged under the training curves' names, so plots overlay eval on them.
        row = {"reward/mean": res["reward"], "success_rate": res["success_rate"]}
        row |= {"episodes": res["episodes"], "time/eval": time.perf_counter() - t0}
        row["tool_calls/episode"] = res.get("tool_calls", 0.0)
        row |= {k: v for k, v in res.items() if k.startswith("harness/")}
        file = UNTOUCHED_FILE if tag == "untouched" else "eval.jsonl"
        self.logger.log(self.step, row, file=file, echo=False)
        if self.c.backend.is_main:
            self.logger.console.print(
                f"[bold cyan]eval ({tag})[/] step {self.step}: success {res['success_rate']:.3f}"
            )
        return res

    def bootstrap_sft(self) -> None:
        """Short SFT on oracle demos; the engine and the reference then start from its weights."""
        from .sft import build_demos

        cfg, c = self.cfg, self.c
        t0 = time.perf_counter()
        items = c.data.demo_items(cfg.sft.demos)  # the training rows on a dataset run
        demos = build_demos(c.make_env, c.rollout.chat, items, cfg.sft.skip_tools)
        with self.progress.task("sft", cfg.sft.steps) as bar:

            def log(step: int, loss: float) -> None:
                self.logger.log(step + 1, {"loss": loss}, file="sft.jsonl", echo=False)
                bar.advance(status=f"loss {loss:.3f}")

            losses = self.actor.sft(demos, cfg.sft, c.tokenizer.pad_token_id, cfg.trainer.seed, log)
        took = time.perf_counter() - t0
        summary = {"loss_first": losses[0], "loss_last": losses[-1], "time/sft": took}
        self.logger.log(len(losses), summary, file="sft.jsonl", echo=False)
        if c.backend.is_main:
            self.logger.console.print(
                f"[bold]sft[/] {len(losses)} steps on {len(demos)} demos: loss "
                f"{losses[0]:.3f} -> {losses[-1]:.3f} ({took:.0f}s)"
            )
        weights = dict(self.actor.named_weights())
        c.rollout.sync_weights(weights.items())
        if c.reference is not None:
            c.reference.load_weights(weights)

    def report_held_out(self, after: dict[str, float]) -> None:
        """Print the before/after held-out success (the number the quickstart is judged on)."""
        if self.c.backend.is_main and (line := held_out_summary(self.out / "eval.jsonl", after)):
            self.logger.console.print(f"[bold green]{line}[/]")

    @staticmethod
    def timed(fn: Any) -> tuple[Any, float]:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        state = self.actor.state()
        state |= {"cursor": self.c.data.cursor, "generator": self.generator.get_state()}
        state |= {"kl_ctrl": self.kl_ctrl.state_dict()} | self.collector.state()
        if self.c.critic is not None:
            state |= self.c.critic.state()
        return state

    def save_checkpoint(self) -> None:
        state = self.state()
        export = self.hf_exporter()
        if self.c.backend.is_main:
            extra = None if export is None else lambda d: export(d / HF_DIR)
            self.checkpointer.save(self.step, state, extra)
        self.c.backend.barrier()

    def hf_exporter(self) -> Any:
        """A function writing the current policy as an HF directory at a given path (None
        when `trainer.save_hf` is off). The weights are gathered here, on every rank."""
        if not self.cfg.trainer.save_hf:
            return None
        if not isinstance(self.actor, Actor):  # a Ray worker holds the model: not exported yet
            if self.c.backend.is_main:
                self.logger.console.print("[yellow]trainer.save_hf: skipped (Ray placement)[/]")
            return None
        weights = dict(self.actor.named_weights())
        return lambda path: export_hf(self.actor.model, weights, self.c.tokenizer, path)

    def export_final(self) -> None:
        """`final/`: the last step's policy as an HF directory (see `agentrl.trainer.export`)."""
        export = self.hf_exporter()
        if export is not None and self.c.backend.is_main:
            import shutil

            shutil.rmtree(self.out / FINAL_DIR, ignore_errors=True)
            export(self.out / FINAL_DIR)
        self.c.backend.barrier()

    def load_checkpoint(self) -> bool:
        """Restore the latest checkpoint; False when there is none (a fresh start)."""
        state = self.checkpointer.load()
        if state is None:
            return False
        self.actor.load_state(state)
        self.c.data.cursor = state["cursor"]
        self.generator.set_state(state["generator"])
        if "kl_ctrl" in state:  # checkpoints from before the adaptive KL controller lack it
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.collector.load_state(state)
        if self.c.critic is not None:
            self.c.critic.load_state(state)
        self.step = state["step"]
        self.c.rollout.sync_weights(self.actor.named_weights())
        self.logger.truncate_after(self.step)
        # Evals after the checkpoint are redone; at the last step, so is the final one.
        final = self.step >= self.cfg.trainer.steps
        self.logger.truncate_after(self.step, "eval.jsonl", inclusive=not final)
        return True

    def finish(self) -> None:
        """Close the log, end this session in `run.json` (when one started), plot, and close
        every component; the components are closed even when an earlier part raises."""
        try:
            self.collector.close()  # a step raised mid-run: stop what collects first
            self.logger.close()
            if self.c.backend.is_main and self.session:
                run_dir.end_session(self.out)
                try:
                    from agentrl.report import write_plots

                    write_plots(self.out)
                except ImportError:
                    pass
        finally:
            self.gc.close()
            self.c.close()
