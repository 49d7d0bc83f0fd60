"""`agentrl serve`: an OpenAI-compatible endpoint that records token-exact trajectories.

agentrl serve --model tiny:qwen2 --port 8000 --out served.jsonl
# then: OpenAI(base_url="http://127.0.0.1:8000/v1"), header X-Session-Id per episode
"""

from __future__ import annotations

import argparse
from typing import Literal

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="OpenAI-compatible server that records trajectories",
        formatter_class=RichHelpFormatter,
    )
    p.add_argument("--model", required=True, help="checkpoint dir or tiny:<preset>")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--out",
        default=None,
        help="append each finished request's trajectory here at once (compacted on shutdown)",
    )
    p.add_argument("--fsync", action="store_true", help="fsync --out after every request")
    p.add_argument(
        "--fast",
        choices=["auto", "on", "off"],
        default="off",
        help="the hf engine's CUDA-graph fast path: faster, but no top_logprobs, token "
        "streaming or constrained decoding (default off)",
    )
    p.add_argument("--model-name", default="agentrl", help="name reported by /v1/models")
    p.add_argument("--max-new-tokens", type=int, default=512, help="default max_tokens")
    p.add_argument("--temperature", type=float, default=1.0, help="default temperature")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--device", default=None)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from agentrl.serve import create_app
    except ImportError as e:
        print(f"agentrl serve needs the serve extra: pip install 'agentrl[serve]' ({e})")
        return 2
    from agentrl.cli.rollout import load_engine
    from agentrl.config.schema import SamplingConfig

    fast: Literal["auto"] | bool = "auto" if args.fast == "auto" else args.fast == "on"
    engine, chat = load_engine(args.model, args.device, args.max_batch_size, fast=fast)
    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    app = create_app(
        engine,
        chat,
        model_name=args.model_name,
        sampling=sampling,
        out=args.out,
        tokenizer_name=args.model,
        fsync=args.fsync,
    )
    print(
        f"serving {args.model} at http://{args.host}:{args.port}/v1 (tool format "
        f"{chat.tool_format}); trajectories at /v1/trajectories"
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
