"""Rollout throughput: plain transformers `generate` vs agentrl's hf engine fast path.

Same model, same prompts, same process. The model is random-init, built from a config (no
downloads): by default the Qwen2.5-0.5B shape (hidden 896, 24 layers, 14 heads, 2 kv heads,
intermediate 4864, vocab 151936, tied embeddings), bf16 on CUDA. Every request samples at
temperature 1 with top-k/top-p off and ignores EOS, so both sides generate exactly
`--new-tokens` tokens per prompt.

Sections: (1) correctness on the big model (GPU): bf16 greedy match rate vs `generate`,
float32 greedy identity, bf16 sampled-logprob error vs a full-forward re-score;
(2) single-turn throughput at each `--batches` size; (3) a multi-turn tool workload where
episodes pause for a tool with random latency: the engine (continuous batching + session
reuse) vs lockstep batched `generate` that waits for the slowest tool each turn.

    python benchmarks/gpu_engine.py --json benchmarks/results/gpu_engine.json      # on a GPU
    python benchmarks/gpu_engine.py --device cpu --model qwen2-small --batches 1,8 \\
        --prompt-len 64 --new-tokens 64 --episodes 8                                 # on CPU
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import platform
import random
import time
from typing import Any

import torch
from gpu_grpo import QWEN05_VOCAB  # benchmarks/ is sys.path[0] when run as a script
from gpu_grpo import SHAPES as GRPO_SHAPES

from agentrl.config import FastHFTuning, HFTuning
from agentrl.engines import HFEngine, SamplingParams
from agentrl.engines.hf_fast import FastHFEngine

HBM_BYTES_PER_S = 4.8e12  # H200 datasheet; KINDS.md measured ~4.3e12 for a d2d copy
SHAPES: dict[str, dict[str, Any]] = {
    # The one Qwen2.5-0.5B shape every GPU benchmark uses (defined in gpu_grpo.py).
    "qwen2.5-0.5b": dict(
        **GRPO_SHAPES["qwen2.5-0.5b"], vocab_size=QWEN05_VOCAB, max_position_embeddings=32768
    ),
    # agentrl.models.tiny's quickstart preset, with the vocabulary of its tokenizer
    "qwen2-small": dict(**GRPO_SHAPES["qwen2-small"], vocab_size=1024),
}


def build_model(name: str, device: str, dtype: torch.dtype) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[name]))
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    return model


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def prompts_for(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, length), generator=gen).tolist()


def hf_generate(model: Any, prompts: list[list[int]], new: int, sample: bool = True) -> Any:
    """Plain `generate`: sampling at temperature 1 with top-k/top-p off, or greedy."""
    ids = torch.tensor(prompts, device=model.device)
    kw: dict[str, Any] = dict(temperature=1.0, top_k=0, top_p=1.0) if sample else {}
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
            do_sample=sample,
            **kw,
        )
    return out[:, ids.shape[1] :]


def engine_batch(engine: HFEngine, prompts: list[list[int]], params: SamplingParams) -> Any:
    async def body() -> Any:
        reqs = [
            engine.generate(p, SamplingParams(**{**vars(params), "seed": (params.seed or 0) + i}))
            for i, p in enumerate(prompts)
        ]
        return await asyncio.gather(*reqs)

    return asyncio.run(body())


def timed(fn: Any, device: str) -> tuple[Any, float]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def greedy_match(model: Any, prompts: list[list[int]], new: int, **kw: Any) -> dict[str, Any]:
    ref = hf_generate(model, prompts, new, sample=False).tolist()
    engine = FastHFEngine(model, [], **kw)
    got = engine_batch(engine, prompts, SamplingParams(max_new_tokens=new, temperature=0.0))
    pairs = [list(zip(r, g.token_ids, strict=True)) for r, g in zip(ref, got, strict=True)]
    same = sum(a == b for row in pairs for a, b in row)
    prefix = [next((i for i, (a, b) in enumerate(row) if a != b), new) for row in pairs]
    return {
        "prompts": len(prompts),
        "tokens_each": new,
        "token_match_rate": same / (len(prompts) * new),
        "identical_sequences": sum(p == new for p in prefix),
        "first_divergence": prefix,
    }


def logprob_error(model: Any, prompts: list[list[int]], new: int, **kw: Any) -> dict[str, Any]:
    engine = FastHFEngine(model, [], **kw)
    got = engine_batch(engine, prompts, SamplingParams(max_new_tokens=new, temperature=1.0))
    diffs: list[float] = []
    with torch.inference_mode():
        for p, g in zip(prompts, got, strict=True):
            ids = torch.tensor([p + g.token_ids], device=model.device)
            logits = model(input_ids=ids).logits[0, len(p) - 1 : -1].float()
            lp = torch.log_softmax(logits, -1).gather(
                -1, torch.tensor(g.token_ids)[:, None].to(ids)
            )
            diffs += (lp.squeeze(-1).cpu() - torch.tensor(g.logprobs)).abs().tolist()
    return {"tokens": len(diffs), "mean_abs": sum(diffs) / len(diffs), "max_abs": max(diffs)}


def check_correctness(model: Any, args: argparse.Namespace) -> dict[str, Any]:
    vocab = model.config.vocab_size
    prompts = prompts_for(8, 64, vocab, seed=7)
    kw = dict(max_batch_size=8, max_seq_len=256)
    out = {"bf16_greedy": greedy_match(model, prompts, 64, **kw)}
    out["bf16_sampled_logprob_vs_rescore"] = logprob_error(model, prompts[:4], 64, **kw)
    fp32 = copy.deepcopy(model).float()
    out["fp32_greedy"] = greedy_match(fp32, prompts[:4], 32, **kw)
    del fp32
    return out


def throughput(model: Any, engine: HFEngine, batch: int, args: argparse.Namespace) -> dict:
    vocab, new = model.config.vocab_size, args.new_tokens
    prompts = prompts_for(batch, args.prompt_len, vocab, seed=batch)
    params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=1)
    t_hf = float("nan")
    if not args.skip_generate:
        hf_generate(model, prompts[:1], 4)  # warm-up
        out, t_hf = timed(lambda: hf_generate(model, prompts, new), args.device)
        assert out.shape == (batch, new)
    engine_batch(engine, prompts, params)  # warm-up: captures this workload's graphs
    res, t_eng = timed(lambda: engine_batch(engine, prompts, params), args.device)
    n_eng = sum(len(r.token_ids) for r in res)
    assert n_eng == batch * new, n_eng
    hf_tps, eng_tps = batch * new / t_hf, n_eng / t_eng
    limit = batch * HBM_BYTES_PER_S / weight_bytes(model)
    extra: dict[str, float] = {}
    if args.compare_chunk1:  # same engine, same graphs, one decode step per worker hop
        chunk, engine.decode_chunk = engine.decode_chunk, 1
        _, t_one = timed(lambda: engine_batch(engine, prompts, params), args.device)
        engine.decode_chunk = chunk
        extra["engine_chunk1_tok_s"] = batch * new / t_one
    if args.plain_engine and args.device == "cpu":  # the non-fast HFEngine, same prompts
        plain = HFEngine(
            model, [], max_batch_size=batch, tuning=HFTuning(max_prefill_tokens=1 << 20)
        )
        engine_batch(plain, prompts[:1], SamplingParams(max_new_tokens=4))
        _, t_plain = timed(lambda: engine_batch(plain, prompts, params), args.device)
        extra["plain_hfengine_tok_s"] = batch * new / t_plain
    return {
        **extra,
        "batch": batch,
        "generate_tok_s": hf_tps,
        "engine_tok_s": eng_tps,
        "ratio": eng_tps / hf_tps,
        "weight_bw_limit_tok_s": limit,
        "engine_fraction_of_limit": eng_tps / limit,
        "generate_s": t_hf,
        "engine_s": t_eng,
    }


def weight_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


async def _episodes(engine: HFEngine, args: argparse.Namespace, vocab: int) -> int:
    rng = random.Random(0)
    lat = [
        [rng.uniform(*args.tool_latency) for _ in range(args.turns)] for _ in range(args.episodes)
    ]
    starts = prompts_for(args.episodes, args.prompt_len, vocab, seed=99)

    async def episode(i: int) -> int:
        ids, n = list(starts[i]), 0
        for turn in range(args.turns):
            params = SamplingParams(max_new_tokens=args.turn_tokens, temperature=1.0, seed=i)
            res = await engine.generate(ids, params, session_id=f"ep{i}")
            n += len(res.token_ids)
            await asyncio.sleep(lat[i][turn])
            ids += res.token_ids + prompts_for(1, args.obs_tokens, vocab, seed=i * 100 + turn)[0]
        engine.release_session(f"ep{i}")
        return n

    return sum(await asyncio.gather(*(episode(i) for i in range(args.episodes))))


def lockstep_generate(model: Any, args: argparse.Namespace) -> int:
    """Batched `generate` per turn; every episode waits for the turn's slowest tool."""
    rng = random.Random(0)
    lat = [
        [rng.uniform(*args.tool_latency) for _ in range(args.turns)] for _ in range(args.episodes)
    ]
    vocab, n = model.config.vocab_size, 0
    ids = prompts_for(args.episodes, args.prompt_len, vocab, seed=99)
    for turn in range(args.turns):
        out = hf_generate(model, ids, args.turn_tokens).tolist()
        n += sum(len(o) for o in out)
        time.sleep(max(lat[i][turn] for i in range(args.episodes)))
        obs = [
            prompts_for(1, args.obs_tokens, vocab, seed=i * 100 + turn)[0] for i in range(len(ids))
        ]
        ids = [a + o + b for a, o, b in zip(ids, out, obs, strict=True)]
    return n


def multi_turn(model: Any, engine: HFEngine, args: argparse.Namespace) -> dict[str, Any]:
    vocab = model.config.vocab_size
    asyncio.run(_episodes(engine, args, vocab))  # warm-up (graphs for these buckets)
    n_eng, t_eng = timed(lambda: asyncio.run(_episodes(engine, args, vocab)), args.device)
    n_hf, t_hf = (
        (0, float("nan"))
        if args.skip_generate
        else timed(lambda: lockstep_generate(model, args), args.device)
    )
    out = {
        "episodes": args.episodes,
        "turns": args.turns,
        "turn_tokens": args.turn_tokens,
        "tool_latency_s": list(args.tool_latency),
        "generate_lockstep_tok_s": n_hf / t_hf,
        "engine_tok_s": n_eng / t_eng,
        "ratio": (n_eng / t_eng) / (n_hf / t_hf),
        "engine_stats": dict(engine.stats),
    }
    if args.plain_engine:
        plain = HFEngine(model, [], max_batch_size=args.episodes)
        n_pl, t_pl = timed(lambda: asyncio.run(_episodes(plain, args, vocab)), args.device)
        out["plain_hfengine_tok_s"] = n_pl / t_pl
    return out


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """The model and workload flags (also gpu_vllm.py's, which passes them on to this script)."""
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    p.add_argument("--batches", default="1,64,256")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--turn-tokens", type=int, default=48)
    p.add_argument("--obs-tokens", type=int, default=32)
    p.add_argument("--tool-latency", type=float, nargs=2, default=(0.02, 0.2))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_workload_args(p)
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument(
        "--plain-engine", action="store_true", help="also time HFEngine (throughput: CPU only)"
    )
    p.add_argument("--skip-check", action="store_true")
    p.add_argument(
        "--skip-generate", action="store_true", help="no `generate` baseline (ratios are nan)"
    )
    p.add_argument("--no-graphs", action="store_true", help="fast path without CUDA graphs")
    p.add_argument("--decode-chunk", type=int, default=8, help="FastHFEngine decode_chunk")
    p.add_argument("--compile-decode", action="store_true", help="torch.compile the decode forward")
    p.add_argument(
        "--compile-prefill",
        action="store_true",
        help="torch.compile the prefill forward (multi-turn: a prefill per turn)",
    )
    p.add_argument(
        "--compare-chunk1",
        action="store_true",
        help="also time each batch with decode_chunk=1 (one step per hop: the old behaviour)",
    )
    p.add_argument("--json", default=None)
    return p.parse_args()


def main() -> None:
    args = parse()
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.bfloat16 if args.device == "cuda" else torch.float32)  # fmt: skip
    model = build_model(args.model, args.device, dtype)
    batches = [int(b) for b in args.batches.split(",")]
    report: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"cpu {platform.machine()}",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "model": args.model,
        "dtype": str(dtype).replace("torch.", ""),
        "params": sum(p.numel() for p in model.parameters()),
        "weight_bytes": weight_bytes(model),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "torch_threads": torch.get_num_threads(),
    }
    if args.device == "cuda" and not args.skip_check:
        report["correctness"] = check_correctness(model, args)
        print(json.dumps(report["correctness"], indent=1), flush=True)
    max_len = args.prompt_len + max(
        args.new_tokens, args.turns * (args.turn_tokens + args.obs_tokens)
    )
    engine = FastHFEngine(
        model,
        [],
        max_batch_size=max(batches + [args.episodes]),
        max_seq_len=(max_len + 127) // 128 * 128,
        tuning=FastHFTuning(
            max_prefill_tokens=max(batches + [args.episodes]) * args.prompt_len,
            session_slots=args.episodes,
            cuda_graphs=False if args.no_graphs else None,
            decode_chunk=args.decode_chunk,
            compile_decode=args.compile_decode,
            compile_prefill=args.compile_prefill,
        ),
    )
    report["compile_decode"] = args.compile_decode
    report["compile_prefill"] = args.compile_prefill
    report["cuda_graphs"] = engine.cuda_graphs
    report["decode_chunk"] = engine.decode_chunk
    t0 = time.perf_counter()
    report["precaptured_graphs"] = engine.precapture([args.prompt_len + 1, max_len])
    report["precapture_s"] = time.perf_counter() - t0
    report["throughput"] = []
    for batch in batches:
        row = throughput(model, engine, batch, args)
        report["throughput"].append(row)
        print(json.dumps(row), flush=True)
        save(report, args.json)  # partial results survive a timeout
    report["multi_turn"] = multi_turn(model, engine, args)
    report["captured_graphs"] = engine.captured_graphs
    print(json.dumps(report["multi_turn"]), flush=True)
    print_table(report)
    save(report, args.json)


def save(report: dict[str, Any], path: str | None) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{report['model']} {report['dtype']} on {report['device']}")
    print("| batch | generate tok/s | engine tok/s | ratio | engine / weight-bw limit |")
    print("|---:|---:|---:|---:|---:|")
    for r in report["throughput"]:
        print(
            f"| {r['batch']} | {r['generate_tok_s']:,.0f} | {r['engine_tok_s']:,.0f} | "
            f"{r['ratio']:.1f}x | {r['engine_fraction_of_limit']:.1%} |"
        )
    m = report["multi_turn"]
    print(
        f"multi-turn ({m['episodes']} episodes x {m['turns']} turns): lockstep generate "
        f"{m['generate_lockstep_tok_s']:,.0f} tok/s, engine {m['engine_tok_s']:,.0f} tok/s, "
        f"{m['ratio']:.1f}x"
    )


if __name__ == "__main__":
    main()
