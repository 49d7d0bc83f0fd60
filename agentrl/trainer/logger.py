"""Metrics: console (rich), `metrics.jsonl`, TensorBoard, and wandb when enabled and installed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from agentrl.report.metrics import UNTOUCHED_FILE

SHOWN = ("reward/mean", "success_rate", "response_length/mean", "kl", "entropy", "time/step")


class MetricsLogger:
    def __init__(
        self,
        out_dir: Path,
        *,
        tensorboard: bool,
        wandb: bool,
        config: dict[str, Any],
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.out_dir = out_dir
        self.path = out_dir / "metrics.jsonl"
        # soft_wrap: a step line stays one line in a log file (rich wraps at 80 columns when
        # stdout is not a terminal); a terminal wraps it itself.
        self.console = Console(soft_wrap=True)
        self.tb: Any = None
        self.wandb: Any = None
        # Writers open on the first row, so building a trainer writes nothing into a folder
        # the run-folder policy (`run_dir.claim`) has yet to approve.
        self._want = (tensorboard, wandb, config)
        self._opened = False

    def _open(self) -> None:
        self._opened = True
        tensorboard, wandb, config = self._want
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.out_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wb

                self.wandb = wb.init(project="agentrl", config=config, dir=str(self.out_dir))
            except ImportError:
                self.console.print(
                    "[yellow]trainer.wandb=true but wandb is not installed; skipping[/]"
                )

    def truncate_after(
        self, step: int, file: str = "metrics.jsonl", inclusive: bool = True
    ) -> None:
        """On resume, forget rows of steps after the checkpoint (they are redone); with
        `inclusive=False` the checkpoint's own step goes too (a final eval that is redone)."""
        path = self.path.with_name(file)
        if not self.enabled or not path.exists():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln]
        keep = [
            ln
            for ln in lines
            if json.loads(ln)["step"] < step or (inclusive and json.loads(ln)["step"] == step)
        ]
        path.write_text("".join(ln + "\n" for ln in keep))

    def log(
        self,
        step: int,
        metrics: dict[str, float],
        file: str = "metrics.jsonl",
        echo: bool = True,
    ) -> None:
        """Append a row to `file`; TensorBoard/wandb tags are `<file stem>/<key>` for files
        other than metrics.jsonl (`sft.jsonl` + `loss` -> `sft/loss`). `echo`: also print."""
        if not self.enabled:
            return
        if not self._opened:
            self._open()
        row = {"step": step, "time": time.time(), **metrics}
        with open(self.path.with_name(file), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        prefix = "" if file == "metrics.jsonl" else file.split(".")[0] + "/"
        tags = {(k if k.startswith(prefix) else prefix + k): v for k, v in metrics.items()}
        if self.tb is not None:
            for k, v in tags.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(tags, step=step)
        if echo:
            shown = " ".join(f"{k}={metrics[k]:.4g}" for k in SHOWN if k in metrics)
            if overlong := metrics.get("termination/overlong", 0.0):  # a budget cuts episodes
                shown += f" overlong={overlong:.0%}"
            self.console.print(f"[bold]{prefix}step {step}[/] {shown}")

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def held_out_summary(path: Path, after: dict[str, float]) -> str | None:
    """ "held-out success: 12.5% before RL -> 40.0% after (...)" from `eval.jsonl`'s step-0
    row and the final eval `after`; when SFT ran, "1.6% untouched -> 12.5% after SFT ->
    40.0% after RL (...)" with the untouched model's eval; None without both."""
    if not (after and path.exists()):
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    starts = [r for r in rows if r["step"] == 0]
    if not starts:
        return None
    b, a = starts[-1]["success_rate"], after["success_rate"]
    tail = f"({(a - b) * 100:+.1f} points, {int(after['episodes'])} episodes)"
    untouched = path.with_name(UNTOUCHED_FILE)
    if untouched.exists() and (lines := untouched.read_text().splitlines()):
        u = json.loads(lines[-1])["success_rate"]
        return (
            f"held-out success: {u:.1%} untouched -> {b:.1%} after SFT -> {a:.1%} after RL "
            + tail.replace(" points", " points from RL")
        )
    return f"held-out success: {b:.1%} before RL -> {a:.1%} after {tail}"
