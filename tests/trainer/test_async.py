"""`trainer.async.max_staleness` (agentrl/trainer/pipeline.py) on real tiny-model runs.

- K = 0 is the synchronous loop: the same metrics and bit-identical weights as a run without
  the key (the same seeds; sampling is seeded per task, so this holds across processes).
- K = 1, one run per staleness policy (`trainer.async.staleness`), each asking for prompts
  deeper than K allows (`prefetch_batches: 3`): every sampled token carries the policy
  version that sampled it; no trained token is more than K versions behind and no group
  spans more than K + 1 versions. `drop` issues them all, drops stale groups and never
  issues a prompt twice; `pace` (the default; the process-producer run) and `wait` (the
  thread run) issue K + 1 batches and count the prompts held back; `wait` never drops. The
  `async/stale/*` counters are in every metrics row, in TensorBoard and in `agentrl runs show
  --json`, and carry over a resume.
- kill -9 in the middle of a pipelined step (its metrics written, its checkpoint not) then
  `--resume` (`wait` on a thread, `pace` in a child process): every prompt is trained exactly
  once, and the prompts issued but not trained at the checkpoint (`async_pending`) are the
  first ones issued again, with what their episodes had done (`async_inflight`: a finished
  episode is trained as it was kept; every kept episode is counted in `async/resume/*`;
  continued episodes: tests/trainer/test_async_resume.py).
- The same with the rollout in a child process (`trainer.async.producer: process`): K = 0
  still matches the synchronous loop bit for bit (the child's engine gets the trainer's
  weights through the staging copy), K = 1 keeps the bounds, and a kill -9 of the trainer
  takes its rollout child with it.

The runs are the real CLI in subprocesses (single-threaded, started together): eight
end-to-end runs, 40 s on an idle 2-core machine and 100 s on CI's, so the module runs in CI's
slow stage. The default suite covers the pipeline with smaller runs: test_staleness,
test_offpolicy_train, test_collector, test_async_resume and tests/e2e/test_quickstart_async.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides

from agentrl.trainer.inflight import OUTCOMES
from agentrl.types import Trajectory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KILL_HOOK = """
import os, signal, sys
from agentrl.trainer import logger

log = logger.MetricsLogger.log
def log_then_die(self, step, metrics, file="metrics.jsonl", **kw):
    log(self, step, metrics, file, **kw)
    if step == 3 and file == "metrics.jsonl":  # step 4's episodes are in flight now
        import multiprocessing
        children = [str(p.pid) for p in multiprocessing.active_children()]
        (self.out_dir / "children.txt").write_text(" ".join(children))
        os.kill(os.getpid(), signal.SIGKILL)
logger.MetricsLogger.log = log_then_die

from agentrl.cli import main
sys.exit(main(sys.argv[1:]))
"""

DEEP = {"trainer__async__max_staleness": 1, "trainer__async__prefetch_batches": 3}
RUNS = {
    "sync": {},
    "k0": {"trainer__async__max_staleness": 0},
    "drop": DEEP | {"trainer__async__staleness": "drop", "trainer__tensorboard": "true"},
    "killed": DEEP | {"trainer__async__staleness": "wait"},
    "proc_k0": {"trainer__async__producer": "process"},
    "proc_killed": DEEP | {"trainer__async__producer": "process"},  # staleness: pace (default)
}
KILLED = ("killed", "proc_killed")
POLICY_RUNS = {"drop": "drop", "killed": "wait", "proc_killed": "pace"}


def _args(cache: Path, out: Path, extra: dict) -> list[str]:
    config = out.parent / f"{out.name}.yaml"
    config.write_text("model:\n  path: tiny:qwen2\n")
    base = {"trainer__steps": 4, "trainer__save_every": 2, "algorithm__entropy_coef": 0.05}
    base |= {"trainer__dump_rollouts_every": 1, "data__eval_episodes": 0}
    return ["train", "--config", str(config), *train_overrides(cache, out, **(base | extra))]


def _start(argv: list[str], log: Path, kill: bool = False) -> subprocess.Popen:
    """The CLI in a subprocess; its output goes to a file (pipes of several runs at once
    fill up while the first is waited on)."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    head = ["-c", KILL_HOOK] if kill else ["-m", "agentrl.cli"]
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, *head, *argv], env=env, stdout=f, stderr=f)


def _wait(proc: subprocess.Popen, log: Path) -> int:
    proc.wait(timeout=800)
    if proc.returncode not in (0, -9):
        raise AssertionError(log.read_text()[-5000:])
    return proc.returncode


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, cache = tmp_path_factory.mktemp("async"), tiny_model_dir.parent
    args = {name: _args(cache, root / name, extra) for name, extra in RUNS.items()}
    logs = {name: root / f"{name}.log" for name in RUNS}
    procs = {n: _start(argv, logs[n], kill=n in KILLED) for n, argv in args.items()}
    codes = {name: _wait(p, logs[name]) for name, p in procs.items()}
    assert codes == {name: -9 if name in KILLED else 0 for name in RUNS}
    for name in KILLED:
        assert [r["step"] for r in _rows(root / name)] == [1, 2, 3]
    orphans = {name: _survivors(root / name / "children.txt") for name in KILLED}
    (root / "orphans.json").write_text(json.dumps(orphans))
    resumed = {name: root / f"{name}.resumed.log" for name in KILLED}
    again = {n: _start([*args[n], "--resume"], log) for n, log in resumed.items()}
    assert {n: _wait(p, resumed[n]) for n, p in again.items()} == dict.fromkeys(KILLED, 0)
    return {name: root / name for name in RUNS} | {"orphans": root / "orphans.json"}


def _survivors(pids_file: Path, wait_s: float = 20.0) -> list[int]:
    """The killed trainer's child processes still alive after `wait_s` seconds."""
    pids = [int(p) for p in pids_file.read_text().split()]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _state(out: Path, step: int) -> dict:
    return torch.load(out / "checkpoints" / f"step_{step:06d}" / "state.pt", weights_only=False)


def _dumps(out: Path) -> dict[int, list[dict]]:
    files = sorted((out / "rollouts").glob("step_*.jsonl"))
    return {
        int(f.stem.split("_")[1]): [json.loads(line) for line in f.read_text().splitlines()]
        for f in files
    }


# The engine's last bits: a rollout worker in a child process runs its own thread count, so
# its log-probs differ from the in-process engine's at ~1e-8 (`rollout_logp_absdiff` shows
# it; k3's `rollout_kl` rounds it to 0.0). The loss does not use them at K = 0.
LAST_BITS = ("rollout_logp_absdiff",)


def _untimed(row: dict) -> dict:
    return {
        k: v
        for k, v in row.items()
        if k != "time"
        and k not in LAST_BITS
        and not k.startswith(("time/", "throughput/", "span/"))
    }


@pytest.mark.parametrize("name", ["k0", "proc_k0"])
def test_k0_is_the_synchronous_loop(name: str, runs: dict[str, Path]) -> None:
    sync, k0 = runs["sync"], runs[name]
    assert [_untimed(r) for r in _rows(k0)] == [_untimed(r) for r in _rows(sync)]
    a, b = _state(sync, 4)["model"], _state(k0, 4)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any(k.startswith("async/") for k in _rows(k0)[0])
    for step, trajs in _dumps(k0).items():  # synchronous: every token from the step's policy
        assert {v for t in trajs for v in t["weight_versions"] if v >= 0} == {step - 1}


@pytest.mark.parametrize("name", ["killed", "drop", "proc_killed"])
def test_staleness_bounded_and_visible(name: str, runs: dict[str, Path]) -> None:
    rows = _rows(runs[name])
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert max(r["async/staleness_max"] for r in rows) <= 1
    assert max(r["async/group_version_span_max"] for r in rows) <= 1
    assert max(r["async/staleness_mean"] for r in rows) > 0  # it did overlap
    for r in rows:
        assert 0 <= r["async/off_policy_token_share"] <= 1 and r["async/is_ratio_min"] > 0
    for step, trajs in _dumps(runs[name]).items():
        groups: dict[int, set[int]] = {}
        for t in trajs:
            assert len(t["weight_versions"]) == len(t["response_ids"])
            sampled = {v for v, m in zip(t["weight_versions"], t["loss_mask"], strict=True) if m}
            assert -1 not in sampled and all(step - 1 - v <= 1 for v in sampled)
            groups.setdefault(t["metadata"]["prompt_index"], set()).update(sampled)
        assert all(max(vs) - min(vs) <= 1 for vs in groups.values() if vs)


COUNTERS = {
    "drop": {"dropped_groups"},
    "pace": {"dropped_groups", "refilled_groups", "held_prompts"},
    "wait": {"dropped_groups", "waited_groups", "wait_s", "held_prompts"},
}


@pytest.mark.parametrize("name", sorted(POLICY_RUNS))
def test_each_staleness_policy_keeps_its_promise(name: str, runs: dict[str, Path]) -> None:
    """K = 1 with 3 batches asked for. Every prompt issued is trained once, pending at the
    end, or (`drop` only) dropped; counters in every row, cumulative ones never going back
    (the killed runs resumed them from the step-2 checkpoint)."""
    policy, out = POLICY_RUNS[name], runs[name]
    rows = _rows(out)
    stale = [
        {k.removeprefix("async/stale/"): v for k, v in r.items() if "/stale/" in k} for r in rows
    ]
    assert all(set(s) == COUNTERS[policy] for s in stale), stale
    assert all(r["async/staleness_max"] <= 1 for r in rows)
    for key in COUNTERS[policy] - {"held_prompts", "wait_s"}:
        assert [s[key] for s in stale] == sorted(s[key] for s in stale), key
    trained = [t["metadata"]["prompt_index"] for trajs in _dumps(out).values() for t in trajs]
    assert set(trained.count(k) for k in trained) == {2}  # rollout.n samples, one group each
    final = _state(out, 4)
    pending, dropped = final["async_pending"], final["async_stale_counts"]["dropped_groups"]
    assert dropped == stale[-1]["dropped_groups"] and not set(trained) & set(pending)
    if policy == "drop":  # issued 6 deep: stale groups, their prompts never issued again
        assert dropped > 0 and "held_prompts" not in stale[-1]
        assert len(set(trained)) + dropped + len(pending) == final["cursor"]
    else:  # K + 1 = 2 batches of 2 issued, 2 of the 6 asked for held back at every step
        assert sorted([*set(trained), *pending]) == list(range(final["cursor"]))
        assert all(s["held_prompts"] == 2 for s in stale)
    if policy == "pace":  # every drop was refilled
        assert all(s["dropped_groups"] == s["refilled_groups"] for s in stale)
    if policy == "wait":
        assert all(s["dropped_groups"] == 0 and s["wait_s"] >= 0 for s in stale)


def test_staleness_counters_reach_tensorboard_and_runs_show(runs: dict[str, Path]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(runs["drop"] / "tensorboard"))
    acc.Reload()
    assert "async/stale/dropped_groups" in acc.Tags()["scalars"]
    for name in ("drop", "killed"):
        shown = subprocess.run(
            [sys.executable, "-m", "agentrl.cli", "runs", "show", "--json", str(runs[name])],
            capture_output=True,
            text=True,
            check=True,
        )
        last = json.loads(shown.stdout)["last"]
        assert {f"async/stale/{k}" for k in COUNTERS[POLICY_RUNS[name]]} <= set(last)


@pytest.mark.parametrize("name", KILLED)
def test_kill_mid_pipelined_step_resumes_without_loss_or_duplicates(
    name: str, runs: dict[str, Path]
) -> None:
    out = runs[name]
    assert [r["step"] for r in _rows(out)] == [1, 2, 3, 4]
    checkpoint = _state(out, 2)
    pending = checkpoint["async_pending"]
    assert len(pending) == 2  # K batches of 2 prompts were rolling when step 2 was saved
    trained = [t["metadata"]["prompt_index"] for trajs in _dumps(out).values() for t in trajs]
    per_prompt = {k: trained.count(k) for k in set(trained)}
    assert set(per_prompt.values()) == {2}  # rollout.n samples, one group, no duplicates
    final = _state(out, 4)
    assert sorted([*per_prompt, *final["async_pending"]]) == list(range(final["cursor"]))
    before = {t["metadata"]["prompt_index"] for s in (1, 2) for t in _dumps(out)[s]}
    assert not before & set(pending)  # in flight at the checkpoint: trained after resume
    # What the checkpoint kept of them (`async_inflight`): every episode accounted for by
    # the resumed run, a finished one trained exactly as it was kept.
    kept = checkpoint["async_inflight"]
    assert sorted(kept) == sorted(pending) and all(len(g["episodes"]) == 2 for g in kept.values())
    last = _rows(out)[-1]
    assert sum(last[f"async/resume/{o}"] for o in OUTCOMES) == 4
    trained_at = {
        (t["metadata"]["prompt_index"], t["metadata"]["sample"]): t
        for trajs in _dumps(out).values()
        for t in trajs
    }
    for k, group in kept.items():
        for s, state in enumerate(group["episodes"]):
            if isinstance(state, Trajectory):
                assert trained_at[(k, s)]["response_ids"] == state.response_ids
                assert trained_at[(k, s)]["weight_versions"] == state.weight_versions


def test_killed_trainer_takes_its_rollout_process_along(runs: dict[str, Path]) -> None:
    orphans = json.loads(runs["orphans"].read_text())
    assert orphans == dict.fromkeys(KILLED, [])
    pids = (runs["proc_killed"] / "children.txt").read_text().split()
    assert len(pids) == 1  # the rollout child existed, and is gone
