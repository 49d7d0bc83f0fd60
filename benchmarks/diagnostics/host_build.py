"""Host-side batch building under interpreter-lock contention: `collate` and the fast engine's
prefill, alone and beside a busy thread.

Why: a pipelined run with the thread producer (`trainer.async`) builds its train batch and the
engine builds its prefill inputs while other threads of the process run Python. Each torch
call releases the interpreter lock and takes it back, so code making many small torch calls
(one per row per field) waits for the lock once per call. On the H200 sweep (session 9) the
engine's prefill took 29-38 ms a call pipelined against 11-16 ms in the synchronous loop,
and the trainer's untimed host work 0.07 s a step against 0.02 s.

    python benchmarks/diagnostics/host_build.py            # this checkout
    python benchmarks/diagnostics/host_build.py --json F   # also write the numbers

Reported: milliseconds per call, alone and beside one thread that spins in Python (the lock's
default 5 ms switch interval), for agentrl's builds and, as the named peer, the per-row torch
builds they replaced (session 8's code, kept here only to measure against).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.trainer.batch import collate
from agentrl.types import Trajectory, TrajectoryGroup, Turn


def episodes(n: int, seed: int = 0) -> list[TrajectoryGroup]:
    """`n` three-turn episodes shaped like the GPU workload's (~150-token prompt, 3 x 40
    sampled tokens, 2 x 30 tool tokens), in groups of 8."""
    rng = random.Random(seed)
    trajs = []
    for _ in range(n):
        t = Trajectory(prompt_ids=[rng.randrange(3, 1000) for _ in range(150)], reward=1.0)
        for k in range(3):
            start = len(t.response_ids)
            t.append(
                [rng.randrange(3, 1000) for _ in range(40)], trained=True, logprobs=[-0.5] * 40
            )
            end = len(t.response_ids)
            if k < 2:
                t.append([rng.randrange(3, 1000) for _ in range(30)], trained=False)
            t.turns.append(Turn(start=start, end=end, obs_end=len(t.response_ids), reward=0.0))
        trajs.append(t)
    return [TrajectoryGroup(str(i), trajs[i : i + 8]) for i in range(0, n, 8)]


def prefill_rows(n: int, seed: int = 0) -> list[tuple[int, int, list[int]]]:
    """An admission mixing new prompts and tool-result continuations."""
    rng = random.Random(seed)
    return [
        (
            i,
            0 if i % 4 == 0 else 300,
            [rng.randrange(3, 1000) for _ in range(150 if i % 4 == 0 else 30)],
        )
        for i in range(n)
    ]


def peer_collate(groups: list[TrajectoryGroup], pad_id: int) -> dict[str, torch.Tensor]:
    """The peer: session 8's `collate`, one set of small torch calls per row."""
    trajs = [t for g in groups for t in g.trajectories]
    b = len(trajs)
    seq_len = max(len(t.prompt_ids) + len(t.response_ids) for t in trajs)
    resp_len = max(len(t.response_ids) for t in trajs)
    out = {
        "input_ids": torch.full((b, seq_len), pad_id, dtype=torch.long),
        "attn": torch.zeros((b, seq_len), dtype=torch.long),
        "logit_index": torch.full((b, resp_len), -1, dtype=torch.long),
        "responses": torch.zeros((b, resp_len), dtype=torch.long),
        "mask": torch.zeros((b, resp_len)),
        "lps": torch.zeros((b, resp_len)),
        "turn_index": torch.full((b, resp_len), -1, dtype=torch.long),
        "token_rewards": torch.zeros((b, resp_len)),
    }
    for i, t in enumerate(trajs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        out["input_ids"][i, : p + r] = torch.tensor(t.input_ids, dtype=torch.long)
        out["attn"][i, : p + r] = 1
        out["logit_index"][i, :r] = torch.arange(p - 1, p - 1 + r)
        out["responses"][i, :r] = torch.tensor(t.response_ids, dtype=torch.long)
        out["mask"][i, :r] = torch.tensor(t.loss_mask, dtype=torch.float)
        out["lps"][i, :r] = torch.tensor(t.logprobs, dtype=torch.float)
        tid = [-1] * r
        for k, turn in enumerate(t.turns):
            tid[turn.start : turn.end] = [k] * (turn.end - turn.start)
        out["turn_index"][i, :r] = torch.tensor(tid, dtype=torch.long)
        last = max((j for j, m in enumerate(t.loss_mask) if m), default=-1)
        if last >= 0:
            out["token_rewards"][i, last] = t.reward
    return out


def peer_prefill_inputs(
    rows: list[tuple[int, int, list[int]]], scratch: int, max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The peer: session 8's prefill input build, small torch calls per row."""
    n, w = len(rows), max(len(t) for _, _, t in rows)
    inp = torch.zeros(4, n, w, dtype=torch.long)
    inp[2] = scratch
    per_row = torch.zeros(2, n, dtype=torch.long)
    per_row[0] = scratch
    for r, (slot, start, toks) in enumerate(rows):
        inp[0, r, : len(toks)] = torch.tensor(list(toks), dtype=torch.long)
        inp[1, r] = torch.arange(start, start + w).clamp(max=max_len - 1)
        inp[2, r, : len(toks)] = slot
        inp[3, r, : len(toks)] = inp[1, r, : len(toks)]
        per_row[:, r] = torch.tensor([slot, len(toks) - 1])
    return inp, per_row


def timed(fn: Any, reps: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return 1e3 * (time.perf_counter() - t) / reps


def beside_busy_thread(fn: Any, reps: int) -> float:
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        return timed(fn, reps)
    finally:
        stop.set()
        thread.join()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=128)
    p.add_argument("--rows", type=int, default=48)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.engines._static_model import StaticDecoder

    groups = episodes(args.episodes)
    cfg = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    decoder = StaticDecoder(Qwen2ForCausalLM(cfg), slots=args.rows, max_len=512)
    rows = prefill_rows(args.rows)
    out: dict[str, Any] = {}
    for name, fn in {  # the builds alone: a tiny model's forward on CPU would swamp them
        "collate": lambda: collate(groups, 0),
        "collate, peer (per-row torch)": lambda: peer_collate(groups, 0),
        "prefill_inputs": lambda: decoder.prefill_inputs(rows),
        "prefill_inputs, peer (per-row torch)": lambda: peer_prefill_inputs(rows, args.rows, 512),
    }.items():
        alone, busy = timed(fn, args.reps), beside_busy_thread(fn, args.reps)
        out[name] = {"alone_ms": alone, "beside_busy_thread_ms": busy, "ratio": busy / alone}
        print(
            f"{name}: {alone:.2f} ms alone, {busy:.2f} ms beside a busy thread ({busy / alone:.1f}x)"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
