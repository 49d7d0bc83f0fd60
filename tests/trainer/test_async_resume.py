"""A pipelined checkpoint keeps the episodes in flight, and `--resume` continues them
(agentrl/trainer/inflight.py, agentrl/rollout/resume.py), on real CLI runs of the fine-tuned
tiny calc agent (multi-turn: it calls the calculator, then answers).

Each run is `trainer.async.max_staleness: 1`, `staleness: wait`, 4 steps, a checkpoint every 2,
and is killed with SIGKILL right after step 3's metrics row (so step 3's work is lost and the
step-2 checkpoint is what resumes). So that step 3's groups are certainly in flight when step
2's checkpoint is written, a hook holds their final answers (the env step that ends an
episode) until that checkpoint exists; tool steps go on, so episodes that called the
calculator stand at a turn boundary, and the checkpoint waits until one such boundary is
recorded (under load every first turn was once still sampling when the episodes were copied:
the wait must come before `Trainer.save_checkpoint` copies them, not in the checkpoint writer
after it, where it once was). No timing is asserted.

- `math/calc-v0` declares `ResumableEnv`: the checkpoint keeps step 3's groups
  (`async_inflight`, the same prompts as `async_pending`); after `--resume` each kept episode
  is trained exactly as recorded (a finished one verbatim; a continued one with the very
  token ids, logprobs and weight versions of its kept prefix, then tokens sampled by the
  resumed weights), every prompt issued is trained exactly once, and `async/resume/*`
  counts every kept episode.
- The same task on an env that does not declare it (a user env file): the episodes past
  their first turn are run again from their seed (`async/resume/reissued`), and the resumed
  run says so in its output; still every prompt is trained exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainer_synth import train_overrides

from agentrl.rollout.resume import EpisodeSnapshot
from agentrl.trainer.inflight import OUTCOMES
from agentrl.types import Trajectory

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # the fine-tuned calc agent

from agent_model import agent_path  # noqa: E402

pytestmark = pytest.mark.timeout(900)

HOOK = """
import asyncio, contextvars, os, signal, sys, threading
from pathlib import Path
from agentrl.envs import ToolEnv
from agentrl.rollout.resume import EpisodeBook
from agentrl.rollout.runner import RolloutRunner
from agentrl.trainer import logger
from agentrl.trainer.trainer import Trainer

FLAG = Path(os.environ["STEP2_SAVED"])
HELD = contextvars.ContextVar("held", default=False)

collect_group = RolloutRunner.collect_group
async def holding(self, task, position, n, key, resume=()):
    HELD.set(int(key[1:-1]) >= 4)  # step 3's prompts (K = 1, wait, 2 x 2 prompts issued)
    return await collect_group(self, task, position, n, key, resume)
RolloutRunner.collect_group = holding

astep = ToolEnv.astep
async def held_answer(self, action):
    while HELD.get() and not action.tool_calls and not FLAG.exists():
        await asyncio.sleep(0.05)
    return await astep(self, action)
ToolEnv.astep = held_answer

marker = EpisodeBook.marker
BOUNDARY = threading.Event()  # a held episode recorded a turn boundary (its call came back)
def marking(self, key, k):
    mark = marker(self, key, k)
    def held_mark(b):
        mark(b)
        if HELD.get():
            BOUNDARY.set()
    return held_mark
EpisodeBook.marker = marking

# The wait comes before `Trainer.save_checkpoint` takes the state: the episodes in flight
# are copied there (`collector.state()`), not in `Checkpointer.save`.
save_checkpoint = Trainer.save_checkpoint
def save_then_release(self):
    if self.step == 2:  # under load step 3's first turns could still be sampling: wait for one
        assert BOUNDARY.wait(timeout=300), "no held step-3 episode reached a turn boundary"
    save_checkpoint(self)
    if self.step == 2:
        FLAG.touch()
Trainer.save_checkpoint = save_then_release

log = logger.MetricsLogger.log
def log_then_die(self, step, metrics, file="metrics.jsonl", **kw):
    log(self, step, metrics, file, **kw)
    if step == 3 and file == "metrics.jsonl":
        os.kill(os.getpid(), signal.SIGKILL)
logger.MetricsLogger.log = log_then_die

from agentrl.cli import main
sys.exit(main(sys.argv[1:]))
"""

PLAIN_ENV = '''
"""The calc task on a ToolEnv that does not declare ResumableEnv."""
from agentrl.envs import ToolEnv, make, register
from agentrl.tools import ToolSet
from agentrl.tools.calculator import calculator


class PlainCalc(ToolEnv):
    family = "test"
    max_turns = 4

    def __init__(self):
        super().__init__(ToolSet.of(calculator))
        self.inner = make("math/calc-v0")

    def new_task(self, rng, options):
        return self.inner.new_task(rng, options)

    def score(self, final):
        self.inner.task = self.task
        return self.inner.score(final)


register("test/plain-calc-v0", PlainCalc)
'''

RUNS = {"calc": "math/calc-v0", "plain": "test/plain-calc-v0"}


def _args(cache: Path, out: Path, env: str) -> list[str]:
    config = out.parent / f"{out.name}.yaml"
    config.write_text(f"model:\n  path: {agent_path()}\n")
    extra = {
        "model__path": str(agent_path()),
        "data__env": env,
        "data__eval_episodes": 0,
        "sampling__max_new_tokens": 48,
        "rollout__max_total_tokens": 400,
        "algorithm__overlong_buffer": 150,
        "algorithm__entropy_coef": 0.05,
        "trainer__steps": 4,
        "trainer__save_every": 2,
        "trainer__dump_rollouts_every": 1,
        "trainer__async__max_staleness": 1,
        "trainer__async__staleness": "wait",
    }
    argv = ["train", "--config", str(config), *train_overrides(cache, out, **extra)]
    if env == RUNS["plain"]:
        module = out.parent / "plain_calc.py"
        module.write_text(PLAIN_ENV)
        argv += ["--env-module", str(module)]
    return argv


def _start(argv: list[str], log: Path, flag: Path | None) -> subprocess.Popen:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    head = ["-c", HOOK] if flag else ["-m", "agentrl.cli"]
    if flag:
        env["STEP2_SAVED"] = str(flag)
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, *head, *argv], env=env, stdout=f, stderr=f)


def _wait(proc: subprocess.Popen, log: Path, code: int) -> None:
    proc.wait(timeout=850)
    assert proc.returncode == code, log.read_text()[-5000:]


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, cache = tmp_path_factory.mktemp("async_resume"), tiny_model_dir.parent
    agent_path()  # built once, before the runs start
    args = {name: _args(cache, root / name, env) for name, env in RUNS.items()}
    logs = {name: root / f"{name}.log" for name in RUNS}
    flags = {name: root / f"{name}.step2" for name in RUNS}
    procs = {n: _start(a, logs[n], flags[n]) for n, a in args.items()}
    for name, proc in procs.items():
        _wait(proc, logs[name], -9)
        assert [r["step"] for r in _rows(root / name)] == [1, 2, 3]
    resumed = {name: root / f"{name}.resumed.log" for name in RUNS}
    again = {n: _start([*args[n], "--resume"], resumed[n], None) for n in RUNS}
    for name, proc in again.items():
        _wait(proc, resumed[name], 0)
    return {name: root / name for name in RUNS}


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _state(out: Path, step: int) -> dict:
    return torch.load(out / "checkpoints" / f"step_{step:06d}" / "state.pt", weights_only=False)


def _trained(out: Path) -> dict[tuple[int, int], dict]:
    """Every trained episode by (prompt index, sample), each exactly once."""
    seen: dict[tuple[int, int], dict] = {}
    for f in sorted((out / "rollouts").glob("step_*.jsonl")):
        for line in f.read_text().splitlines():
            t = json.loads(line)
            key = (t["metadata"]["prompt_index"], t["metadata"]["sample"])
            assert key not in seen, f"{key} trained twice"
            seen[key] = t | {"step": int(f.stem.split("_")[1])}
    return seen


def _sampled(t: dict | Trajectory, start: int = 0, end: int | None = None) -> list[int]:
    versions = t["weight_versions"] if isinstance(t, dict) else t.weight_versions
    mask = t["loss_mask"] if isinstance(t, dict) else t.loss_mask
    return [v for v, m in zip(versions[start:end], mask[start:end], strict=True) if m]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_prompt_is_trained_once_across_the_kill(name: str, runs: dict[str, Path]) -> None:
    out = runs[name]
    rows = _rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert max(r["async/staleness_max"] for r in rows) <= 1
    trained = _trained(out)
    prompts = {k for k, _ in trained}
    assert all({s for k, s in trained if k == p} == {0, 1} for p in prompts)  # rollout.n = 2
    final = _state(out, 4)
    assert sorted([*prompts, *final["async_pending"]]) == list(range(final["cursor"]))
    kept = _state(out, 2)["async_inflight"]
    assert sorted(kept) == sorted(_state(out, 2)["async_pending"]) == [4, 5]
    assert all(len(g["episodes"]) == 2 and g["issued_at"] == 1 for g in kept.values())
    assert {k for k, _ in trained if trained[(k, 0)]["step"] == 3} == {4, 5}
    outcomes = [r for r in rows if r["step"] >= 3]
    assert all(sum(r[f"async/resume/{o}"] for o in OUTCOMES) == 4 for r in outcomes)


def test_resumable_episodes_continue_from_their_last_turn(runs: dict[str, Path]) -> None:
    out = runs["calc"]
    trained = _trained(out)
    kept = _state(out, 2)["async_inflight"]
    continued = 0
    for k, group in kept.items():
        for s, state in enumerate(group["episodes"]):
            t = trained[(k, s)]
            if isinstance(state, Trajectory):  # finished before the checkpoint: verbatim
                assert t["response_ids"] == state.response_ids and "resumed" not in t["metadata"]
                assert t["weight_versions"] == state.weight_versions
                continue
            if state is None:  # had not finished a turn: sampled again from the start
                assert "resumed" not in t["metadata"] and set(_sampled(t)) == {2}
                continue
            assert isinstance(state, EpisodeSnapshot) and state.resumable
            continued += 1
            cut = len(state.traj.response_ids)
            assert t["metadata"]["resumed"] == {"turn": state.turns, "token": cut}
            assert t["response_ids"][:cut] == state.traj.response_ids  # not sampled again
            assert t["logprobs"][:cut] == pytest.approx(state.traj.logprobs)
            assert t["weight_versions"][:cut] == state.traj.weight_versions
            before, after = _sampled(t, 0, cut), _sampled(t, cut)
            assert set(before) <= {1, 2} and after and set(after) == {2}
            assert len(t["messages"]) > len(state.traj.messages)
    assert continued >= 1  # the agent calls the calculator first: a boundary before its answer
    rows = _rows(out)
    assert rows[-1]["async/resume/continued"] == continued
    assert rows[-1]["async/resume/reissued"] == 0
    spans = [set(_sampled(trained[(k, s)])) for k in kept for s in (0, 1)]
    assert any({1, 2} <= v for v in spans)  # a trained episode spans the resume
    line = (out.parent / "calc.resumed.log").read_text()
    assert "resume: 2 groups were in flight at the checkpoint" in line


def test_an_env_without_the_capability_runs_them_again_and_says_so(
    runs: dict[str, Path],
) -> None:
    out = runs["plain"]
    trained = _trained(out)
    kept = _state(out, 2)["async_inflight"]
    states = [s for g in kept.values() for s in g["episodes"]]
    unresumable = [s for s in states if isinstance(s, EpisodeSnapshot)]
    assert unresumable and not any(s.resumable for s in unresumable)
    assert {s.why for s in unresumable} == {"PlainCalc does not declare ResumableEnv"}
    assert _rows(out)[-1]["async/resume/reissued"] == len(unresumable)
    assert _rows(out)[-1]["async/resume/continued"] == 0
    for k, group in kept.items():
        for s, state in enumerate(group["episodes"]):
            if not isinstance(state, Trajectory):  # run from its seed under the new weights
                t = trained[(k, s)]
                assert "resumed" not in t["metadata"] and set(_sampled(t)) == {2}
    log = (out.parent / "plain.resumed.log").read_text()
    assert f"{len(unresumable)} run again from their seed" in log
    assert "PlainCalc does not declare ResumableEnv" in log
