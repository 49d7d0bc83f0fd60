"""`agentrl export RUN [--step N] --out DIR`: a run's checkpoint as a plain HF directory.

Why: runs trained before HF exports existed, or with `trainer.save_hf=false`, still hold
everything in `state.pt`; this writes the same directory `agentrl train` writes beside each
checkpoint (merged weights, tokenizer, chat template; `adapter/` for LoRA runs).
"""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's checkpoint as an HF directory (from_pretrained-loadable)",
        formatter_class=RichHelpFormatter,
        description="Example: agentrl export runs/grpo-calc --step 50 --out exported/",
    )
    p.add_argument("run", help="run folder (holds config.yaml and checkpoints/)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=cmd_export)


def checkpoint_hint(run: str) -> str | None:
    """`RUN` given as a checkpoint folder (`runs/x/checkpoints/step_000020`, or
    `runs/x/checkpoints`): the command that was meant, or None."""
    from pathlib import Path

    path = Path(run)
    if path.name == "checkpoints" and (path.parent / "config.yaml").exists():
        return f"{run} is the checkpoints folder; pass the run folder: {path.parent}"
    if (path / "state.pt").exists() and path.name.startswith("step_"):
        step = int(path.name.removeprefix("step_"))
        run_folder = path.parent.parent
        hf = "; its hf/ folder is already an HF directory" if (path / "hf").exists() else ""
        return (
            f"{run} is a checkpoint folder; pass the run folder and the step: agentrl export "
            f"{run_folder} --step {step} --out DIR{hf}"
        )
    return None


def cmd_export(args: argparse.Namespace) -> int:
    from agentrl.trainer.export import ADAPTER_DIR, export_run

    if hint := checkpoint_hint(args.run):
        print(f"export error: {hint}")
        return 2
    try:
        out = export_run(args.run, args.out, args.step)
    except FileNotFoundError as e:
        print(f"export error: {e}")
        return 2
    extra = f" (+ {ADAPTER_DIR}/ PEFT adapter)" if (out / ADAPTER_DIR).exists() else ""
    print(f"wrote {out}{extra}")
    return 0
