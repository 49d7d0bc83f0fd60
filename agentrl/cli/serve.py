"""`agentrl serve`: an OpenAI-compatible endpoint that records token-exact trajectories.

agentrl serve --model tiny:qwen2 --port 8000 --out served.jsonl
# then: OpenAI(base_url="http://127.0.0.1:8000/v1"), header X-Session-Id per episode;
# the trainer reads and rewards with the admin token (served.jsonl.token), the agent never
agentrl serve --replay served.jsonl --model runs/x/final --json replay.json
# offline: how --model scores the recorded tokens, and where it would diverge (cli/replay)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Literal

from rich_argparse import RichHelpFormatter

TOKEN_ENV = "AGENTRL_SERVE_TOKEN"  # the admin token to use instead of a fresh one


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
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="default temperature (--replay: of turns the file records none for)",
    )
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--device", default=None)
    p.add_argument(
        "--max-body-mb", type=float, default=8.0, help="largest request body (default 8 MiB)"
    )
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="largest rendered prompt, history included (default: the model's context "
        "less one, at most 32768)",
    )
    p.add_argument(
        "--force-first-tool-call",
        nargs="?",
        const="required",
        default="",
        metavar="TOOL",
        help="sample each session's first request with tools and tool_choice auto as one "
        "call (of TOOL where offered, else any; grammar-constrained, recorded in "
        "metadata['constrained_turns']); off by default",
    )
    p.add_argument(
        "--token-file",
        default=None,
        help="write the per-run admin token here (mode 0600; default: <--out>.token). "
        f"${TOKEN_ENV} sets the token instead of a fresh one",
    )
    r = p.add_argument_group(
        "replay", "score a recorded session against --model instead of serving (docs/rollout.md)"
    )
    r.add_argument(
        "--replay",
        metavar="FILE",
        default=None,
        help="a served JSONL file (--out): per-token log-prob differences of --model over its "
        "recorded ids, and the first turn where --model would diverge",
    )
    r.add_argument("--json", metavar="OUT", default=None, help="write the full replay here")
    r.add_argument(
        "--diverge",
        choices=["argmax", "prob"],
        default="argmax",
        help="divergence: the checkpoint's greedy token differs from the recorded one "
        "(argmax, for greedy sessions) or gives it probability below --threshold (prob)",
    )
    r.add_argument("--threshold", type=float, default=1e-3, help="for --diverge prob")
    r.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="the checkpoint's dtype for the replay (default float32)",
    )
    r.add_argument(
        "--force",
        action="store_true",
        help="replay even if the checkpoint's chat template or vocabulary differs",
    )
    p.set_defaults(func=cmd_serve)


def model_context(model: str) -> int | None:
    """The checkpoint's context length (`max_position_embeddings`), None if it has none."""
    from transformers import AutoConfig

    from agentrl.models.tiny import resolve_model_path

    try:
        cfg = AutoConfig.from_pretrained(resolve_model_path(model))
    except (OSError, ValueError):
        return None
    value = cfg.to_dict().get("max_position_embeddings")
    return value if isinstance(value, int) and value > 1 else None


def write_token(path: Path, token: str) -> None:
    """The admin token, readable by its owner only (the agent must not read it: run the
    agent as another user or in a sandbox without this path)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.replay:
        from agentrl.cli.replay import cmd_replay

        return cmd_replay(args)
    try:
        import uvicorn

        from agentrl.serve import create_app
    except ImportError as e:
        print(f"agentrl serve needs the serve extra: pip install 'agentrl[serve]' ({e})")
        return 2
    from agentrl.cli.rollout import load_engine
    from agentrl.config.schema import SamplingConfig
    from agentrl.serve.limits import KEEP_ALIVE_S, MIB, ServeLimits, new_token

    prompt_cap = args.max_prompt_tokens or min(32768, (model_context(args.model) or 32769) - 1)
    try:
        limits = ServeLimits(
            max_body_bytes=int(args.max_body_mb * MIB), max_prompt_tokens=prompt_cap
        )
    except ValueError as e:
        print(f"agentrl serve: {e}")
        return 2
    token = os.environ.get(TOKEN_ENV) or new_token()

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
        limits=limits,
        admin_token=token,
        force_first_tool_call=args.force_first_tool_call,
    )
    token_file = args.token_file or (f"{args.out}.token" if args.out else None)
    if token_file:
        write_token(Path(token_file), token)
    print(
        f"serving {args.model} at http://{args.host}:{args.port}/v1 (tool format "
        f"{chat.tool_format}); trajectories at /v1/trajectories with "
        f"'Authorization: Bearer {token}'" + (f" (also in {token_file})" if token_file else "")
    )
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S
    )
    return 0
