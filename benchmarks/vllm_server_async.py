"""Pipelined GRPO against a real vLLM *server* on this CPU: split placement (the rollout
engine is another process set, reached over HTTP; weights go through a safetensors file).
`trainer.async.max_staleness` K = 1 and K = 2 against the named peer, agentrl's synchronous
loop (K = 0) with the same server, model, env and seeds, in one run.

Run in the vLLM venv (`bash scripts/setup-vllm-cpu.sh`):
    .venv-vllm/bin/python benchmarks/vllm_server_async.py \
        --json benchmarks/results/async/cpu_vllm_server_async.json

1. `agentrl sft` once (the quickstart's `tiny:qwen2-small`, oracle demos of the calculator
   env), so that the policy calls the tool and the tool latency is on the path.
2. Per mode: a fresh vLLM server on that checkpoint (fp32, eager), then `agentrl train` in a
   subprocess on `bench/calc-tool-latency-v0` (`_latency_env.py`: each tool call sleeps
   uniform(lo, hi) seconds), `rollout.concurrency` = (K + 1) batches of episodes.
3. End-to-end sampled tokens/s over the timed steps (after `--warmup`): the sum of each
   step's sampled tokens (`response_length/mean` × trajectories) over the sum of
   `time/step`. The synchronous loop runs first and last, so drift in the machine's load shows.

Prints a table with each mode's ratio to the mean of the synchronous runs; `--json` keeps
the per-step rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.engines.vllm_server import LocalVLLMServer

ROOT = Path(__file__).resolve().parent.parent
ENV_MODULE = ROOT / "benchmarks" / "_latency_env.py"
ENV_ID = "bench/calc-tool-latency-v0"
SERVER_ARGS = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]

TRAIN = """\
model: {{path: {ckpt}, dtype: float32}}
engine:
  kind: vllm
  server_url: {url}
  extra: {{weight_sync_dir: {sync}, served_model_name: {ckpt}, request_timeout_s: 600}}
sampling: {{temperature: 1.0, max_new_tokens: 48}}
rollout: {{n: {n}, max_turns: 4, max_total_tokens: 512, concurrency: {concurrency}}}
data:
  env: {env}
  env_kwargs: {{latency: [{lo}, {hi}]}}
  env_modules: [{module}]
  batch_size: {prompts}
  eval_episodes: 0
algorithm: {{adv_estimator: grpo, policy_loss: ppo_clip, loss_agg_mode: token-mean}}
optim: {{lr: 2.0e-4}}
sft: {{steps: 0}}
trainer:
  steps: {steps}
  mini_batch_size: {batch}
  micro_batch_size: 16
  eval_every: 0
  save_every: 0
  tensorboard: false
  out_dir: {out}
  async: {{max_staleness: {k}}}
"""


def run(cmd: list[str], log: Path, timeout: float) -> None:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")


def sft(work: Path, steps: int) -> Path:
    out = work / "sft"
    cmd = [sys.executable, "-m", "agentrl", "sft", "--config", "configs/quickstart-cpu.yaml",
           "--env", ENV_ID, "--env-module", str(ENV_MODULE), "--steps", str(steps),
           "--out", str(out)]  # fmt: skip
    run(cmd, work / "sft.log", 3600)
    return out


def train(work: Path, ckpt: Path, k: int, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    out, sync = work / f"run-{tag}", work / f"sync-{tag}"
    t0 = time.perf_counter()
    with LocalVLLMServer(
        str(ckpt), port=args.port, args=SERVER_ARGS, log_path=work / f"server-{tag}.log"
    ) as server:
        started = time.perf_counter() - t0
        cfg = work / f"train-{tag}.yaml"
        cfg.write_text(
            TRAIN.format(
                ckpt=ckpt,
                url=server.url,
                sync=sync,
                n=args.n,
                prompts=args.prompts,
                batch=args.n * args.prompts,
                concurrency=args.n * args.prompts * (k + 1),
                env=ENV_ID,
                lo=args.tool_latency[0],
                hi=args.tool_latency[1],
                module=ENV_MODULE,
                steps=args.warmup + args.steps,
                out=out,
                k=k,
            )  # fmt: skip
        )
        cmd = [sys.executable, "-m", "agentrl", "train", "--config", str(cfg)]
        run(cmd, work / f"train-{tag}.log", 3600)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in rows if r["step"] > args.warmup]
    episodes = args.n * args.prompts
    tokens = sum(r["response_length/mean"] * episodes for r in timed)
    seconds = sum(r["time/step"] for r in timed)
    keys = ("step", "time/step", "time/rollout", "time/update", "time/weight_sync",
            "response_length/mean", "tool_calls", "success_rate", "async/staleness_max")  # fmt: skip
    return {
        "mode": tag,
        "max_staleness": k,
        "server_start_s": round(started, 1),
        "tok_s": tokens / seconds,
        "rows": [{key: r.get(key) for key in keys} for r in rows],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", type=int, default=[0, 1, 2, 0], help="K per run")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--steps", type=int, default=6, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per mode")
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--tool-latency", type=float, nargs=2, default=(0.02, 0.5))
    p.add_argument("--port", type=int, default=8731)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    work = Path(tempfile.mkdtemp(prefix="agentrl-vllm-server-async-"))
    t0 = time.perf_counter()
    ckpt = sft(work, args.sft_steps)
    sft_s = time.perf_counter() - t0
    results = []
    for i, k in enumerate(args.modes):
        results.append(train(work, ckpt, k, f"{i}-k{k}", args))
        print(f"K={k}: {results[-1]['tok_s']:.0f} sampled tok/s", flush=True)
    sync = [r["tok_s"] for r in results if r["max_staleness"] == 0]
    peer = sum(sync) / len(sync) if sync else float("nan")
    print(f"\nsft {sft_s:.0f} s; peer: the synchronous loop (K=0), mean {peer:.0f} tok/s")
    print("| run | K | e2e sampled tok/s | vs sync | per step: rollout / update / sync s |")
    print("|---|---:|---:|---:|---|")
    for r in results:
        timed = [x for x in r["rows"] if x["step"] > args.warmup]
        mean = {k: sum(x[k] or 0 for x in timed) / len(timed)
                for k in ("time/rollout", "time/update", "time/weight_sync")}  # fmt: skip
        print(f"| {r['mode']} | {r['max_staleness']} | {r['tok_s']:,.0f} | "
              f"{r['tok_s'] / peer:.2f}× | {mean['time/rollout']:.2f} / "
              f"{mean['time/update']:.2f} / {mean['time/weight_sync']:.2f} |")  # fmt: skip
    if args.json:
        meta = {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                "argv": sys.argv[1:], "load_avg": os.getloadavg(), "sft_s": sft_s}  # fmt: skip
        args.json.write_text(json.dumps({"meta": meta, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
