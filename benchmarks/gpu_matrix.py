"""The learning matrix (issue #42): every `configs/matrix/<model>-<task>.yaml` cell trained at
once, as concurrent `agentrl train` processes sharing one GPU, each within a wall budget.

Why concurrent subprocesses: one device call is 10 minutes and the cells are small (135M-270M
parameters), so each cell gets the whole call's time and a slice of the GPU rather than a
tenth of the time. Each cell is a plain `python -m agentrl train --config CELL
trainer.out_dir=... trainer.max_wall_s=...` (the printed command reproduces it alone); its
untouched -> after-SFT -> after-RL held-out evals are the trainer's own (`untouched.jsonl`,
`eval.jsonl`), read back here, not re-implemented.

Before launching: every config is loaded (a bad one is a failed row), each distinct
`model.path` is resolved once (GGUF conversion or tiny build, so the cells do not race on the
cache), and cells whose env runs model code in a sandbox are probed once: a host without the
sandbox (bubblewrap, root) reports them as skipped with the reason.

Written under `--out` (default $OUT), few files: `rows.jsonl` (one JSON row per cell, appended
as each finishes: model, task, untouched / after-SFT / after-RL held-out success, tool calls
per held-out episode, RL steps done, wall time, command, exit code, error tail),
`table.md`, `curves_<model>.png` (train reward and held-out success per step, one panel per
task) and `runs.tar.gz` (each cell's log and run-folder JSONL/YAML files, no checkpoints).

    python benchmarks/gpu_matrix.py                                  # all cells, GPU, $OUT
    python benchmarks/gpu_matrix.py --prepare-only                   # models converted once
    python benchmarks/gpu_matrix.py --cells 'smollm2-*' --budget-s 300
    python benchmarks/gpu_matrix.py --device cpu --set model.path=tiny:qwen2 ...   # smoke
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "configs" / "matrix"
# Env ids whose reward runs model-written code in `agentrl.sandboxes` (the `backend` env kwarg,
# default local: bubblewrap namespaces as root).
SANDBOXED = ("code/", "math/python", "swe/", "harbor:")
RUN_FILES = ("metrics.jsonl", "eval.jsonl", "untouched.jsonl", "sft.jsonl", "config.yaml")
LOG_CAP = 1 << 20  # bytes of each cell's log kept in runs.tar.gz (its tail)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", nargs="*", default=["*"], help="globs on cell names (file stems)")
    p.add_argument("--config-dir", type=Path, default=MATRIX)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs/matrix-out")))
    p.add_argument("--run-root", type=Path, default=ROOT / "runs" / "matrix")
    p.add_argument("--budget-s", type=float, default=520.0, help="each cell's hard timeout")
    p.add_argument(
        "--reserve-s",
        type=float,
        default=100.0,
        help="kept for the final eval and export: trainer.max_wall_s = budget - reserve",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=0,
        help="cells at once (0: all). On the lent H100 (2026-12-06) all but one of nine failed "
        "with 'CUDA error: out of memory' at their first allocation, probably the search cells' "
        "JAX (bm25s) taking the card, since fixed; a cell crowded out so is retried alone",
    )
    p.add_argument("--device", default="", help="trainer.device for every cell (default: each's)")
    p.add_argument("--cache-dir", default="", help="model.cache_dir for every cell")
    p.add_argument("--set", nargs="*", default=[], help="key=value overrides for every cell")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="'CELL+TAG KEY=VALUE ...'",
        help="one more cell: CELL's recipe with these overrides, named CELL+TAG (its own run "
        "folder and row), e.g. 'gemma3-code+lr2e-6 optim.lr=2e-6': an A/B beside the cell in "
        "the same wave, on the same card (repeatable)",
    )
    p.add_argument(
        "--prepare-only",
        action="store_true",
        help="resolve the models (GGUF conversion) and probe the sandbox, then exit: a first "
        "device call, so the timed one spends its 10 minutes on the cells",
    )
    return p.parse_args(argv)


@dataclass
class Cell:
    name: str
    config: Path
    overrides: list[str]
    model: str = ""  # the cell name's prefix (smollm2, gemma3): the PNG it goes in
    task: str = ""
    env: str = ""
    model_path: str = ""
    cache_dir: str = ""
    backend: str = "local"  # the env's sandbox backend (`backend` env kwarg)
    run_dir: Path = Path()
    log: Path = Path()
    sft: bool = False
    skip: str = ""  # why it does not run (config error, model missing, no sandbox)
    proc: subprocess.Popen[bytes] | None = None
    t0: float = 0.0
    timed_out: bool = False
    crowded: bool = False  # started while other cells ran (a start-up CUDA OOM is retried)
    retried: bool = False
    row: dict[str, Any] = field(default_factory=dict)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "agentrl", "train", "--config", str(self.config),
                "--overwrite", *self.overrides]  # fmt: skip


def variants(args: argparse.Namespace) -> list[tuple[str, Path, list[str]]]:
    """(name, recipe, overrides) of each `--variant`; one clear error for a malformed one."""
    out = []
    for spec in args.variant:
        name, *overrides = spec.split()
        base, plus, tag = name.partition("+")
        path = args.config_dir / f"{base}.yaml"
        if not plus or not tag or not path.is_file():
            raise SystemExit(f"--variant {spec!r}: want 'CELL+TAG KEY=VALUE ...' with CELL one "
                             f"of {sorted(p.stem for p in args.config_dir.glob('*.yaml'))}")  # fmt: skip
        if not overrides or any("=" not in o for o in overrides):
            raise SystemExit(f"--variant {spec!r}: give its KEY=VALUE overrides")
        out.append((name, path, overrides))
    return out


def select(args: argparse.Namespace) -> list[Cell]:
    paths = sorted(args.config_dir.glob("*.yaml"))
    chosen = [(p.stem, p, []) for p in paths if any(fnmatch.fnmatch(p.stem, g) for g in args.cells)]
    chosen += variants(args)
    if not chosen:
        raise SystemExit(f"no cell in {args.config_dir} matches {args.cells}")
    cells = []
    for name, path, extra in chosen:
        run_dir = args.run_root / name
        overrides = [f"trainer.out_dir={run_dir}"]
        overrides.append(f"trainer.max_wall_s={max(args.budget_s - args.reserve_s, 1.0):g}")
        overrides += [f"trainer.device={args.device}"] if args.device else []
        overrides += [f"model.cache_dir={args.cache_dir}"] if args.cache_dir else []
        overrides += ["trainer.tensorboard=false", *args.set, *extra]
        model, _, task = name.partition("-")
        cell = Cell(name, path, overrides, model, task or name, run_dir=run_dir)
        cell.log = args.run_root / f"{name}.log"
        cells.append(cell)
    return cells


def load(cell: Cell) -> None:
    """The cell's resolved config: a config error marks the cell, nothing else."""
    from agentrl.config import TrainConfig, load_config

    try:
        cfg = load_config(TrainConfig, cell.config, cell.overrides)
    except Exception as e:  # noqa: BLE001 - one bad cell is one row
        cell.skip = f"config: {e}"
        return
    cell.env, cell.model_path, cell.sft = cfg.data.env, cfg.model.path, cfg.sft.steps > 0
    cell.cache_dir = cfg.model.cache_dir
    cell.backend = str(cfg.data.env_kwargs.get("backend", "local"))


def prepare_models(cells: list[Cell]) -> None:
    """Resolve each distinct model once (GGUF conversion, tiny build) before the cells start."""
    from agentrl.models.tiny import resolve_model_path

    done: dict[tuple[str, str], str] = {}
    for cell in cells:
        if cell.skip:
            continue
        key = (cell.model_path, cell.cache_dir)
        if key not in done:
            try:
                resolve_model_path(*key)
                done[key] = ""
            except Exception as e:  # noqa: BLE001 - a missing model fails its cells only
                done[key] = f"model {cell.model_path!r}: {type(e).__name__}: {e}"
        cell.skip = done[key]


def sandbox_unavailable(backend: str, cwd: Path) -> str:
    """Why `backend` cannot run a sandboxed program here ('' when it can), from a real run."""
    code = (
        "from agentrl.sandboxes import ExecRequest, get_backend\n"
        f"r = get_backend({backend!r}).run(ExecRequest(code='print(6 * 7)', timeout_s=30))\n"
        "assert r.ok and r.stdout.strip() == '42', (r.status, r.stderr[-300:])\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
            env=child_env(), cwd=cwd,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"sandbox backend {backend!r}: probe timed out"
    if done.returncode == 0:
        return ""
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return f"sandbox backend {backend!r} unavailable on this host: {last[:300]}"


def probe_sandboxes(cells: list[Cell], cwd: Path) -> None:
    probed: dict[str, str] = {}
    for cell in cells:
        if cell.skip or not cell.env.startswith(SANDBOXED):
            continue
        backend = cell.backend
        if backend not in probed:
            probed[backend] = sandbox_unavailable(backend, cwd)
            print(f"sandbox {backend}: {probed[backend] or 'ok'}", flush=True)
        cell.skip = probed[backend]


def child_env() -> dict[str, str]:
    """This process's environment (agentrl as it imports here: the installed package, or the
    checkout through PYTHONPATH), tuned for many processes on one GPU. Children run in the
    run root, never the checkout: `-m`/`-c` put their folder first on sys.path, and the
    checkout's `agentrl/` lacks the envs/tools/sandboxes the installed package maps in."""
    env = dict(os.environ)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # many processes
    # A JAX started in a cell (bm25s did, issue #42) must not take 75% of the card up front.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def start(cell: Cell) -> None:
    cell.log.parent.mkdir(parents=True, exist_ok=True)
    log = cell.log.open("wb")
    cell.t0 = time.monotonic()
    cell.proc = subprocess.Popen(
        cell.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=cell.log.parent, env=child_env(), start_new_session=True,
    )  # fmt: skip
    log.close()  # the child holds its own descriptor


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the cell's process group, SIGKILL it after a grace period."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ------------------------------------------------------------------ reading a finished cell
def read_rows(path: Path) -> list[dict[str, Any]]:
    from agentrl.report.metrics import read_rows as read

    try:
        return read(path)
    except (OSError, ValueError):
        return []


def tail(path: Path, lines: int = 25) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(f.seek(0, 2) - 64_000, 0))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


START_OOM = ("CUDA error: out of memory", "torch.OutOfMemoryError")


def crowded_out(cell: Cell) -> bool:
    """A cell that started beside others and died of CUDA OOM before any RL step: on the lent
    H100 concurrent cells once all but one died so at their first allocation. It runs again
    alone, once, after the others (and the rest run one at a time)."""
    assert cell.proc is not None
    if cell.retried or not cell.crowded or cell.timed_out or cell.proc.returncode == 0:
        return False
    steps = [r for r in read_rows(cell.run_dir / "metrics.jsonl") if "reward/mean" in r]
    return not steps and any(m in tail(cell.log, 400) for m in START_OOM)


def cell_row(cell: Cell, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"cell": cell.name, "model": cell.model, "task": cell.task}
    row |= {"env": cell.env, "model_path": cell.model_path, "config": str(cell.config)}
    row["command"] = shlex.join(cell.command)
    if cell.skip:
        return row | {"status": "skipped", "reason": cell.skip, "exit_code": None}
    assert cell.proc is not None
    code = cell.proc.returncode
    row["exit_code"] = code
    row["wall_s"] = round(time.monotonic() - cell.t0, 1)
    untouched = read_rows(cell.run_dir / "untouched.jsonl")
    evals = read_rows(cell.run_dir / "eval.jsonl")
    steps = [r for r in read_rows(cell.run_dir / "metrics.jsonl") if "reward/mean" in r]
    row["rl_steps"] = max((r["step"] for r in steps), default=0)
    start = [e for e in evals if e["step"] == 0]
    log = tail(cell.log, 400)
    # The final eval is the trainer's "eval (after)": kept when the cell was killed later
    # (export, checkpoint), not taken from an intermediate eval of a cell killed mid-run.
    ended = code == 0 or f"eval (after) step {row['rl_steps']}:" in log
    final = evals[-1] if evals and ended and evals[-1]["step"] == row["rl_steps"] else None
    for name, e in (("untouched", untouched[-1] if untouched else None),
                    ("after_sft" if cell.sft else "before_rl", start[-1] if start else None),
                    ("after_rl", final)):  # fmt: skip
        row[name] = None if e is None else e.get("success_rate")
        row[f"tool_calls_{name}"] = None if e is None else e.get("tool_calls/episode")
    row["eval_episodes"] = int(final["episodes"]) if final else None
    row["train_reward_last"] = steps[-1]["reward/mean"] if steps else None
    row["stopped_on_budget"] = "stopped on budget at step" in log
    row["summary"] = next((s for s in log.splitlines() if "held-out success:" in s), "").strip()
    if cell.timed_out:
        row["status"] = "timeout"
        row["reason"] = f"killed after --budget-s {args.budget_s:g}"
    else:
        row["status"] = "ok" if code == 0 else "failed"
    if row["status"] != "ok":
        row["error_tail"] = tail(cell.log)
        if row["status"] == "failed":  # the table's status names it (it said "failed: ")
            from agentrl.rollout.harness import exception_line

            row["reason"] = exception_line(row["error_tail"]) or f"exit code {code}"
    return row


# ------------------------------------------------------------------ outputs
def pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| cell | env | untouched | after SFT | after RL | RL gain | tool calls/ep (after RL) "
        "| RL steps | wall | status |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in sorted(rows, key=lambda r: r["cell"]):
        start = r.get("after_sft", r.get("before_rl"))
        gain = "-"
        if r.get("after_rl") is not None and start is not None:
            gain = f"{100 * (r['after_rl'] - start):+.1f} pts"
        calls = r.get("tool_calls_after_rl")
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('reason', '')}"
        lines.append(
            f"| {r['cell']} | `{r.get('env') or '-'}` | {pct(r.get('untouched'))} "
            f"| {pct(start)} | {pct(r.get('after_rl'))} | {gain} "
            f"| {'-' if calls is None else f'{calls:.2f}'} | {r.get('rl_steps', '-')} "
            f"| {r.get('wall_s', '-')} s | {status[:120]} |"
        )
    return head + "\n".join(lines) + "\n"


def curves(cells: list[Cell], out: Path) -> list[Path]:
    """One PNG per model: a panel per task, train reward per RL step and held-out greedy
    success (untouched at step -1, after SFT at 0, then every eval)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for model in sorted({c.model for c in cells if not c.skip}):
        mine = [c for c in cells if c.model == model and not c.skip]
        fig, axes = plt.subplots(1, len(mine), figsize=(4 * len(mine), 3.4), squeeze=False)
        for ax, cell in zip(axes[0], mine, strict=True):
            steps = [r for r in read_rows(cell.run_dir / "metrics.jsonl") if "reward/mean" in r]
            ax.plot([r["step"] for r in steps], [r["reward/mean"] for r in steps], label="train")
            evals = read_rows(cell.run_dir / "eval.jsonl")
            ax.plot([e["step"] for e in evals], [e["success_rate"] for e in evals], "o-",
                    label="held-out")  # fmt: skip
            if untouched := read_rows(cell.run_dir / "untouched.jsonl"):
                ax.plot([-1], [untouched[-1]["success_rate"]], "kx", label="untouched")
            ax.set_title(f"{cell.task} ({cell.env})", fontsize=9)
            ax.set_xlabel("RL step (0 = after SFT)")
            ax.set_ylim(-0.02, 1.02)
        axes[0][0].set_ylabel("reward / success")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"{model}: held-out greedy success and train reward")
        fig.tight_layout()
        png = out / f"curves_{model}.png"
        fig.savefig(png, dpi=110)
        plt.close(fig)
        written.append(png)
    return written


def pack(cells: list[Cell], tar_path: Path) -> None:
    """Each cell's log (its last LOG_CAP bytes) and run-folder JSONL/YAML files, no weights."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for cell in cells:
            for name in RUN_FILES:
                if (cell.run_dir / name).is_file():
                    tar.add(cell.run_dir / name, f"{cell.name}/{name}")
            if cell.log.is_file():
                data = cell.log.read_bytes()[-LOG_CAP:]
                info = tarfile.TarInfo(f"{cell.name}/train.log")
                info.size, info.mtime = len(data), int(time.time())
                tar.addfile(info, io.BytesIO(data))


# ------------------------------------------------------------------ the run
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cells = select(args)
    for cell in cells:
        load(cell)
    prepare_models(cells)
    args.run_root.mkdir(parents=True, exist_ok=True)
    probe_sandboxes(cells, args.run_root)
    if args.prepare_only:
        for cell in cells:
            print(f"{cell.name}: {cell.skip or 'ready'}", flush=True)
        return 0
    rows_path = args.out / "rows.jsonl"
    rows_path.write_text("")
    rows: list[dict[str, Any]] = []

    def record(cell: Cell) -> None:
        cell.row = cell_row(cell, args)
        rows.append(cell.row)
        with rows_path.open("a") as f:
            f.write(json.dumps(cell.row) + "\n")
        r = cell.row
        print(
            f"[{r['status']}] {cell.name}: untouched {pct(r.get('untouched'))} -> "
            f"{pct(r.get('after_sft', r.get('before_rl')))} -> {pct(r.get('after_rl'))}, "
            f"{r.get('rl_steps', 0)} RL steps, {r.get('wall_s', 0)} s "
            f"{r.get('reason', '')}",
            flush=True,
        )

    for cell in cells:
        if cell.skip:
            record(cell)
    pending = [c for c in cells if not c.skip]
    running: list[Cell] = []
    width = args.parallel or len(pending)
    try:
        while running or pending:
            while pending and len(running) < width:
                cell = pending.pop(0)
                start(cell)
                cell.crowded = width > 1  # other cells may start beside it
                running.append(cell)
                print(f"started {cell.name}: {shlex.join(cell.command)}", flush=True)
            time.sleep(1.0)
            for cell in list(running):
                assert cell.proc is not None
                if cell.proc.poll() is None and time.monotonic() - cell.t0 > args.budget_s:
                    cell.timed_out = True
                    stop(cell.proc)
                if cell.proc.poll() is not None:
                    running.remove(cell)
                    if crowded_out(cell):
                        print(f"{cell.name}: CUDA OOM at start beside other cells; it runs "
                              "again alone, and the rest one at a time", flush=True)  # fmt: skip
                        cell.retried, width = True, 1
                        pending.append(cell)
                        continue
                    record(cell)
    finally:
        for cell in running:  # interrupted: leave nothing behind
            assert cell.proc is not None
            stop(cell.proc)
    (args.out / "table.md").write_text(table(rows))
    curves(cells, args.out)
    pack(cells, args.out / "runs.tar.gz")
    print(table(rows), flush=True)
    bad = [r["cell"] for r in rows if r["status"] in ("failed", "timeout")]
    if bad:
        print(f"{len(bad)} cell(s) did not finish: {', '.join(bad)}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
