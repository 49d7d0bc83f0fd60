"""Torch intra-op thread counts for the quickstart's SFT bootstrap on a (shared) CPU.

The quickstart's SFT (tiny:qwen2-small, calc-easy oracle demos, batch 16) is timed per step
under several `torch.set_num_threads` settings, interleaved in rounds inside one process so
every setting sees the same machine load. The peer is torch's default thread count (one per
core); the other settings are printed as ratios against it, with the spread of step times
(a loaded machine makes oversubscribed threads stall, which shows as a long tail).

    python benchmarks/diagnostics/sft_threads.py [--threads 1 2] [--rounds 4] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from agentrl.assembly import env_factory, seed_everything
from agentrl.chat import ChatFormat
from agentrl.config import TrainConfig, load_config
from agentrl.models.load import load_model, load_tokenizer
from agentrl.trainer.sft import build_demos, sft_train


def main() -> None:
    default = torch.get_num_threads()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=sorted({1, default}))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="SFT steps per setting per round")
    ap.add_argument("--config", default="configs/quickstart-cpu.yaml")
    args = ap.parse_args()
    cfg: TrainConfig = load_config(TrainConfig, args.config)
    seed_everything(0)
    tok = load_tokenizer(cfg.model)
    model = load_model(cfg.model)
    chat = ChatFormat(tok, cfg.rollout.tool_format)
    seeds = [cfg.data.eval_seed_offset * 2 + i for i in range(cfg.sft.demos)]
    demos = build_demos(env_factory(cfg), chat, seeds, cfg.sft.skip_tools)
    sft = cfg.sft
    sft.steps = args.steps
    times: dict[int, list[float]] = {t: [] for t in args.threads}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = args.threads if r % 2 == 0 else list(reversed(args.threads))
        for t in order:
            torch.set_num_threads(t)
            stamps = [time.perf_counter()]
            sft_train(model, demos, sft, tok.pad_token_id, torch.device("cpu"), seed=r,
                      log=lambda _s, _l, st=stamps: st.append(time.perf_counter()))  # fmt: skip
            times[t] += [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        loads.append(os.getloadavg()[0])
    peer = statistics.median(times[default]) if default in times else None
    rows = []
    for t, ts in times.items():
        med = statistics.median(ts)
        rows.append(
            {
                "threads": t,
                "steps": len(ts),
                "median_s": round(med, 3),
                "min_s": round(min(ts), 3),
                "max_s": round(max(ts), 3),
                "p90_s": round(sorted(ts)[int(0.9 * (len(ts) - 1))], 3),
                "speedup_vs_default": round(peer / med, 2) if peer else None,
            }
        )
    print(json.dumps({"cpus": os.cpu_count(), "torch_default_threads": default,
                      "load_1min": [round(x, 1) for x in loads], "results": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
