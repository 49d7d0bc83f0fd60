"""`agentrl serve --replay FILE --model CKPT`: the replay (`agentrl.serve.replay`) as a table.

One table per session (a row per segment: sampled tokens, mean/max |Δ log-prob|, KL, the first
divergence), the divergent token in its context below it, and with `--json OUT` the whole
replay (every sampled token's two log-probs) for scripts. A file or checkpoint replay cannot
use is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentrl.serve.replay import Replay, ReplayError, SegmentReplay


def load_checkpoint(model: str, device: str | None, dtype: str) -> tuple[Any, Any]:
    """(model in eval mode on `device`, its ChatFormat) for a checkpoint folder (a run's
    `final/`), a `tiny:` preset or a GGUF, loaded as training loads it."""
    import torch

    from agentrl.chat import ChatFormat
    from agentrl.config import ModelConfig
    from agentrl.models.load import load_model, load_tokenizer

    cfg = ModelConfig(path=model, dtype=dtype)  # type: ignore[arg-type]  # argparse choices
    net = load_model(cfg, trainable=False)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return net.to(device), ChatFormat(load_tokenizer(cfg))


def cmd_replay(args: argparse.Namespace) -> int:
    from agentrl.serve.replay import replay_file

    try:
        net, chat = load_checkpoint(args.model, args.device, args.dtype)
    except (OSError, ValueError) as e:  # ConfigError is one
        print(f"agentrl serve --replay: --model {args.model}: {str(e).splitlines()[0]}")
        return 2
    try:
        result = replay_file(
            args.replay,
            net,
            chat,
            model_name=args.model,
            criterion=args.diverge,
            threshold=args.threshold,
            force=args.force,
            default_temperature=args.temperature,
            keep_tokens=bool(args.json),
        )
    except ReplayError as e:
        print(f"agentrl serve --replay: {e}")
        return 2
    render(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def render(result: Replay, console: Any = None) -> None:
    """The replay as one table per session, each divergence in its context below it."""
    from rich.console import Console

    console = console or Console(emoji=False, highlight=False)
    how = "greedy token differs" if result.criterion == "argmax" else f"p < {result.threshold:g}"
    console.print(f"replay of {result.file} against {result.model} (divergence: {how})")
    for note in result.notes:
        console.print(f"note: {note}", markup=False)
    sessions: dict[str, list[SegmentReplay]] = {}
    for seg in result.segments:
        sessions.setdefault(seg.session, []).append(seg)
    for name, segs in sessions.items():
        console.print(_table(name, segs))
        for seg in segs:
            d = seg.divergence
            if d is not None:
                console.print(
                    f"  segment {_short(seg)}, turn {d.turn}, char {d.char_offset}: "
                    f"...{d.before!r} then recorded {d.recorded_text!r} (logp "
                    f"{d.recorded_logprob:.2f}, checkpoint {d.checkpoint_logprob:.2f}), "
                    f"checkpoint's choice {d.checkpoint_text!r}",
                    markup=False,
                )


def _table(session: str, segs: list[SegmentReplay]) -> Any:
    from rich.table import Table

    table = Table(title=f"session {session}", title_justify="left")
    for col in ("segment", "turns", "sampled", "mean |Δ|", "max |Δ|", "KL (k3)"):
        table.add_column(col, justify="right")
    table.add_column("divergence")
    for seg in segs:
        table.add_row(
            _short(seg),
            str(seg.turns),
            str(seg.sampled),
            f"{seg.mean_abs_delta:.2e}",
            f"{seg.max_abs_delta:.2e}",
            f"{seg.kl_k3:.2e}",
            _divergence(seg),
        )
    return table


def _short(seg: SegmentReplay) -> str:
    """The segment's own part of its snapshot key (the table is per session)."""
    prefix = seg.session + "/"
    return seg.segment[len(prefix) :] if seg.segment.startswith(prefix) else seg.segment


def _divergence(seg: SegmentReplay) -> str:
    d = seg.divergence
    if d is None:
        return "none"
    return f"turn {d.turn}, message {d.message}, token {d.position}"
