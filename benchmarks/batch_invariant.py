"""What `model.kernels: batch_invariant` costs: the same rollout and the same trainer passes
with torch's kernels (default) and with the batch-invariant ones, same model, same process.

Measured per kernels choice, alternating (default, exact, default, exact, ...) so machine
load hits both alike; the median of `--repeats` is printed:
- rollout: `--episodes` concurrent two-turn episodes on HFEngine (a tool result appended
  between turns, the second turn reusing the first's KV), sampled tokens per second;
- logprobs: the trainer's no-grad log-prob pass over those episodes (right-padded batch);
- update: one forward + backward of the log-probs (the update's shape, no optimizer).
Also checks, on the exact side, that the engine's and the trainer's log-probs are equal.

    python benchmarks/batch_invariant.py                       # tiny:qwen2-small, 8 episodes
    python benchmarks/batch_invariant.py --preset qwen2 --episodes 16 --repeats 5
    python benchmarks/batch_invariant.py --device cuda --preset qwen2 --episodes 64  # a GPU

On a GPU the blocked matmuls are cuBLAS calls of one shape each and the attention is torch's
elementwise ops: whether that makes the engine's and the trainer's log-probs equal there is
what `engine==trainer` reports (the CPU proof does not cover a GPU's kernels). `--json`
writes the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.config import ModelConfig
from agentrl.engines.base import SamplingParams
from agentrl.engines.hf import HFEngine
from agentrl.models.load import load_model
from agentrl.models.tiny import build_tiny
from agentrl.trainer.batch import TrainBatch
from agentrl.trainer.logprobs import response_log_probs

TOOL = [11, 12, 13, 14]


async def rollout(model: Any, args: argparse.Namespace) -> tuple[list[Any], float]:
    engine = HFEngine(copy.deepcopy(model), [0], max_batch_size=64)
    vocab = model.config.vocab_size

    async def episode(i: int) -> tuple[list[int], Any, Any]:
        prompt = [(7 * i + 3 * j) % (vocab - 20) + 15 for j in range(args.prompt_len + 3 * i)]
        params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=i)
        first = await engine.generate(prompt, params, session_id=str(i))
        second = prompt + first.token_ids + TOOL
        return prompt, first, await engine.generate(second, params, session_id=str(i))

    start = time.perf_counter()
    try:
        out = await asyncio.gather(*(episode(i) for i in range(args.episodes)))
    finally:
        await engine.close()
    return list(out), time.perf_counter() - start


def train_batch(episodes: list[Any]) -> TrainBatch:
    rows = [(p, f.token_ids + TOOL + s.token_ids, f, s) for p, f, s in episodes]
    b, seq = len(rows), max(len(p) + len(r) for p, r, _, _ in rows)
    width = max(len(r) for _, r, _, _ in rows)
    ids, attn = torch.zeros(b, seq, dtype=torch.long), torch.zeros(b, seq, dtype=torch.long)
    index, resp = torch.full((b, width), -1), torch.zeros(b, width, dtype=torch.long)
    mask, lps = torch.zeros(b, width), torch.zeros(b, width)
    for i, (p, r, f, s) in enumerate(rows):
        ids[i, : len(p) + len(r)], attn[i, : len(p) + len(r)] = torch.tensor(p + r), 1
        index[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
        resp[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = torch.tensor([1.0] * len(f.token_ids) + [0.0] * len(TOOL) + [1.0] * len(s.token_ids))  # fmt: skip
        lps[i, : len(r)] = torch.tensor(f.logprobs + [0.0] * len(TOOL) + s.logprobs)
    z = torch.zeros(b, width)
    return TrainBatch(ids, attn, index, resp, mask, lps, z, z.long(), torch.arange(b), torch.zeros(b))  # fmt: skip


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(model: Any, args: argparse.Namespace) -> dict[str, float]:
    episodes, wall = asyncio.run(rollout(model, args))
    tokens = sum(len(f.token_ids) + len(s.token_ids) for _, f, s in episodes)
    batch = train_batch(episodes).to(args.device)
    sync(args.device)
    start = time.perf_counter()
    with torch.no_grad():
        logp, _ = response_log_probs(model, batch)
    sync(args.device)
    logprob_s = time.perf_counter() - start
    model.train()
    start = time.perf_counter()
    cur, _ = response_log_probs(model, batch)
    (cur * batch.response_mask).sum().backward()
    sync(args.device)
    update_s = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    model.eval()
    m = batch.response_mask.bool()
    return {
        "rollout_tok_s": tokens / wall,
        "logprobs_s": logprob_s,
        "update_s": update_s,
        "exact": float(torch.equal(logp[m], batch.rollout_log_probs[m])),
        "max_abs_diff": float((logp[m] - batch.rollout_log_probs[m]).abs().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen2-small")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "agentrl"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--json", default=None, help="write the medians here")
    args = ap.parse_args()
    torch.set_num_threads(1)  # what model.kernels=batch_invariant requires; both sides alike
    path = str(build_tiny(args.preset, args.cache))
    models = {}
    for kernels in ("default", "batch_invariant"):
        torch.manual_seed(0)
        cfg = ModelConfig(path=path, kernels=kernels, dtype=args.dtype)
        models[kernels] = load_model(cfg, trainable=False).to(args.device)
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in models}
    for _ in range(args.repeats):
        for kernels, model in models.items():
            runs[kernels].append(measure(model, args))
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU, 1 torch thread"  # fmt: skip
    print(f"tiny:{args.preset} {args.dtype}, {args.episodes} episodes x 2 turns, {where}, median of {args.repeats}")  # fmt: skip
    med = {k: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for k, rs in runs.items()}
    for kernels, row in med.items():
        print(
            f"{kernels:>16}: rollout {row['rollout_tok_s']:8.1f} tok/s  logprobs "
            f"{row['logprobs_s'] * 1e3:8.1f} ms  update fwd+bwd {row['update_s'] * 1e3:8.1f} ms  "
            f"engine==trainer {bool(row['exact'])} (max |diff| {row['max_abs_diff']:.2e})"
        )
    d, e = med["default"], med["batch_invariant"]
    print(
        f"batch_invariant / default: rollout throughput {e['rollout_tok_s'] / d['rollout_tok_s']:.3f}x, "
        f"logprob pass time {e['logprobs_s'] / d['logprobs_s']:.2f}x, "
        f"update fwd+bwd time {e['update_s'] / d['update_s']:.2f}x"
    )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"where": where, "args": vars(args), **med}))


if __name__ == "__main__":
    main()
