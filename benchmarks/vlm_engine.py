"""VLM rollout throughput: `HFVisionEngine` (batched decode) vs transformers `generate` per request.

The peer is the usual way to sample from a transformers VLM in a rollout loop: one
`model.generate(input_ids, pixel_values, image_grid_thw)` call per request. agentrl's engine
serves the same requests concurrently (per-request prefill with its own images and M-RoPE
positions, one batched decode forward for all rows). Tiny random-init presets (nothing is
downloaded), one image per request, EOS off so both sides sample exactly `--new-tokens`.

    python benchmarks/vlm_engine.py [--requests 16] [--new-tokens 32] [--batch 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import torch
from PIL import Image

from agentrl.chat import ChatFormat
from agentrl.config import ModelConfig
from agentrl.engines.base import SamplingParams
from agentrl.engines.hf_vision import HFVisionEngine
from agentrl.models.load import load_model, load_tokenizer, load_vision_processor
from agentrl.models.tiny_vlm import build_tiny_vlm
from agentrl.types import Message

CACHE = os.environ.get("AGENTRL_CACHE", os.path.expanduser("~/.cache/agentrl"))


def requests(tok: Any, vp: Any, n: int) -> list[tuple[list[int], dict[str, Any]]]:
    out = []
    for k in range(n):
        image = Image.new("RGB", (56 + 8 * (k % 4), 56), (40 * (k % 6), 90, 200 - 10 * k % 200))
        msgs = [Message("user", f"describe picture {k} " * (1 + k % 3), images=[image])]
        ids = ChatFormat(tok, vision=vp).prompt_ids(msgs, None)
        inp = vp.process(image)
        ids, _ = vp.expand(ids, [inp])
        mm = {
            "pixel_values": inp.pixel_values,
            "image_grid_thw": torch.tensor([list(inp.grid_thw)]),
        }
        out.append((ids, mm))
    return out


def run_generate(model: Any, reqs: list[Any], new_tokens: int) -> float:
    t = time.perf_counter()
    for ids, mm in reqs:
        with torch.no_grad():
            model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                **mm,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
            )
    return time.perf_counter() - t


def run_engine(model: Any, reqs: list[Any], new_tokens: int, batch: int) -> float:
    engine = HFVisionEngine(model, [], max_batch_size=batch)  # no EOS ids: exact lengths
    params = [
        SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=k) for k in range(len(reqs))
    ]

    async def go() -> None:
        await asyncio.gather(
            *(
                engine.generate(ids, p, multimodal=mm)
                for (ids, mm), p in zip(reqs, params, strict=True)
            )
        )
        await engine.close()

    t = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="qwen2_vl,qwen2_5_vl,qwen3_vl")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="best of N")
    args = ap.parse_args()
    print("| preset | generate per request s | engine s | ratio |\n|---|---:|---:|---:|")
    for preset in args.presets.split(","):
        cfg = ModelConfig(path=str(build_tiny_vlm(preset, CACHE)), enable_vision=True)
        tok = load_tokenizer(cfg)
        model = load_model(cfg, trainable=False)
        model.generation_config.eos_token_id = None
        reqs = requests(tok, load_vision_processor(cfg, tok), args.requests)
        gen = min(run_generate(model, reqs, args.new_tokens) for _ in range(args.repeats))
        eng = min(run_engine(model, reqs, args.new_tokens, args.batch) for _ in range(args.repeats))
        print(f"| {preset} | {gen:.2f} | {eng:.2f} | {gen / eng:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
