"""Metrics: console (rich), `metrics.jsonl`, TensorBoard, and wandb when enabled and installed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

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
        self.path = out_dir / "metrics.jsonl"
        self.console = Console()
        self.tb: Any = None
        self.wandb: Any = None
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wb

                self.wandb = wb.init(project="agentrl", config=config, dir=str(out_dir))
            except ImportError:
                self.console.print(
                    "[yellow]trainer.wandb=true but wandb is not installed; skipping[/]"
                )

    def start_fresh(self) -> None:
        """A new (not resumed) run in an existing folder starts its logs from scratch."""
        if self.enabled:
            for name in ("metrics.jsonl", "eval.jsonl", "sft.jsonl"):
                self.path.with_name(name).unlink(missing_ok=True)

    def truncate_after(self, step: int) -> None:
        """On resume, forget metrics of steps after the checkpoint (they are redone)."""
        if not self.enabled or not self.path.exists():
            return
        keep = [
            ln for ln in self.path.read_text().splitlines() if ln and json.loads(ln)["step"] <= step
        ]
        self.path.write_text("".join(ln + "\n" for ln in keep))

    def log(self, step: int, metrics: dict[str, float], file: str = "metrics.jsonl") -> None:
        if not self.enabled:
            return
        row = {"step": step, "time": time.time(), **metrics}
        with open(self.path.with_name(file), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        prefix = "" if file == "metrics.jsonl" else file.split(".")[0] + "/"
        if self.tb is not None:
            for k, v in metrics.items():
                self.tb.add_scalar(prefix + k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({prefix + k: v for k, v in metrics.items()}, step=step)
        shown = " ".join(f"{k}={metrics[k]:.4g}" for k in SHOWN if k in metrics)
        self.console.print(f"[bold]{prefix}step {step}[/] {shown}")

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
