"""Does pipelining hurt learning? `configs/quickstart-gpu.yaml` synchronous vs `trainer.async`.

Issue #21's learning check: the same recipe, seeds and number of sampled episodes (steps x
batch x n) trained with `trainer.async.max_staleness: 0` and `1` (more with `--staleness`);
held-out success (greedy, the recipe's `data.eval_episodes`) every `--eval-every` steps.
Both curves go into one PNG (x: sampled episodes) and one JSON with the final numbers and
each run's wall time. The runs are the real `agentrl train` CLI, one after the other on the one
GPU, or `--parallel N` at once (learning per step is comparable; wall times are not).

Issue #41's matrix names its runs with `--modes NAME=K[:key=value,...]` instead of
`--staleness` (K = 0 is the synchronous loop; the keys are overrides for that run only):

    python benchmarks/gpu_async_learning.py --seeds 0 1 2 --modes sync=0 \
        naive4=4 decoupled4=4:algorithm.off_policy=decoupled

    python benchmarks/gpu_async_learning.py --out /tmp/gpu_out/async_learning          # H200
    python benchmarks/gpu_async_learning.py --config configs/quickstart-cpu.yaml \\
        --set trainer.steps=2 sft.steps=2 data.eval_episodes=4 data.batch_size=2 rollout.n=2 \\
        --eval-every 1 --out /tmp/al                                           # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace, mode: Mode, seed: int) -> dict[str, Any]:
    name, k, extra = mode
    out = args.out / f"{name}_seed{seed}"
    sets = [
        f"trainer.async.max_staleness={k}",
        f"trainer.seed={seed}",
        f"trainer.eval_every={args.eval_every}",
        f"trainer.out_dir={out}",
        "trainer.save_hf=false",
        "trainer.tensorboard=false",
        *args.set,
        *([f"trainer.async.producer={args.producer}"] if k else []),
        *extra,
    ]
    cmd = [sys.executable, "-m", "agentrl.cli", "train", "--config", str(args.config)]
    cmd += [*sets, "--overwrite"]
    t0 = time.perf_counter()
    with open(args.out / f"{name}_seed{seed}.log", "w") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=log, timeout=args.timeout, env=os.environ)
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            rc = f"timeout after {args.timeout:.0f} s"
    res: dict[str, Any] = {"mode": name, "k": k, "seed": seed, "overrides": extra}
    res["wall_s"] = time.perf_counter() - t0
    res["producer"] = args.producer if k else "-"
    if rc:
        res["error"] = f"rc {rc}; see {log.name}"
        if not (out / "eval.jsonl").exists():
            return res
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines() if x]
    mpath = out / "metrics.jsonl"
    metrics = [json.loads(x) for x in mpath.read_text().splitlines() if x] if mpath.exists() else []
    per_step = args.episodes_per_step
    res["curve"] = [
        {"step": e["step"], "episodes": e["step"] * per_step, "success": e["success_rate"]}
        for e in evals
    ]
    res["final_success"] = evals[-1]["success_rate"] if evals else None
    res["rl_s"] = sum(m["time/step"] for m in metrics)
    res["staleness_mean"] = [m.get("async/staleness_mean") for m in metrics]
    res["staleness_max"] = max((m.get("async/staleness_max", 0.0) for m in metrics), default=0)
    return res


Mode = tuple[str, int, list[str]]


def modes(args: argparse.Namespace) -> list[Mode]:
    """`--modes NAME=K[:key=value,...]`, else one mode per `--staleness` value."""
    if not args.modes:
        return [(f"k{k}", k, []) for k in args.staleness]
    out: list[Mode] = []
    for spec in args.modes:
        name, _, rest = spec.partition("=")
        k, _, sets = rest.partition(":")
        if not name or not k.isdigit():
            raise SystemExit(f"--modes: {spec!r} is not NAME=K[:key=value,...]")
        out.append((name, int(k), [s for s in sets.split(",") if s]))
    return out


def plot(runs: list[dict[str, Any]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        if "curve" in r:
            xs = [p["episodes"] for p in r["curve"]]
            ys = [100 * p["success"] for p in r["curve"]]
            label = "synchronous" if r["k"] == 0 else f"{r['mode']} K={r['k']} ({r['producer']})"
            ax.plot(xs, ys, marker="o", label=f"{label}, seed {r['seed']}")
    ax.set_xlabel("sampled training episodes")
    ax.set_ylabel("held-out success (%)")
    ax.set_title(f"{title}: synchronous vs pipelined (trainer.async)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart-gpu.yaml")
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1])
    p.add_argument("--modes", nargs="+", default=[], help="NAME=K[:key=value,...] per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--producer", choices=["thread", "process"], default="thread", help="K >= 1")
    p.add_argument("--set", nargs="*", default=[], help="overrides for every run (key=value)")
    p.add_argument("--timeout", type=float, default=270, help="seconds per run")
    p.add_argument("--parallel", type=int, default=1, help="runs at once on the one GPU")
    p.add_argument("--out", type=Path, default=Path("/tmp/gpu_out/async_learning"))
    p.add_argument("--json", type=Path, default=None, help="default: <out>/async_learning.json")
    return p.parse_args()


def main() -> None:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    from agentrl.config import TrainConfig, load_config

    cfg = load_config(TrainConfig, args.config, args.set, validate=False)
    args.episodes_per_step = cfg.data.batch_size * cfg.rollout.n
    jobs = [(mode, seed) for seed in args.seeds for mode in modes(args)]
    runs = []
    # `--parallel N`: N runs share the GPU at once (learning curves per step stay comparable;
    # wall times do not, so speed comes from a serial run).
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        for res in pool.map(lambda job: run(args, *job), jobs):
            runs.append(res)
            print(json.dumps({key: v for key, v in res.items() if key != "curve"}), flush=True)
    png = args.out / "async_learning.png"
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "argv": sys.argv[1:],
        "config": str(args.config),
        "episodes_per_step": args.episodes_per_step,
        "runs": runs,
        "png": str(png) if plot(runs, png, args.config.stem) else None,
    }
    sync = {r["seed"]: r.get("final_success") for r in runs if r["k"] == 0}
    result["gap_points_vs_sync"] = {
        f"{r['mode']}_seed{r['seed']}": 100 * (r["final_success"] - sync[r["seed"]])
        for r in runs
        if r["k"] and r.get("final_success") is not None and sync.get(r["seed"]) is not None
    }
    path = args.json or args.out / "async_learning.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
