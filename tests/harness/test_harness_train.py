"""`agentrl train --agent module:fn`: an agent program, unchanged, trained through the gateway.

Real parts throughout: the tiny qwen2 model and its tokenizer, the real `agentrl serve` app
under uvicorn on the training engine, the real `openai` client in a child process per episode,
the env's own grader. The agents live in `harness_agents.py` and know nothing of agentrl.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install 'agentrl[serve]'")
pytest.importorskip("uvicorn", reason="pip install 'agentrl[serve]'")
pytest.importorskip("openai", reason="pip install openai")

from agentrl.cli import main  # noqa: E402
from agentrl.rollout.harness import Episode  # noqa: E402
from agentrl.trainer.harness import held_out_result  # noqa: E402
from agentrl.types import ToolCall, Trajectory, TrajectoryGroup, Turn  # noqa: E402

pytestmark = pytest.mark.timeout(600)
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(autouse=True)
def agents_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent child imports `harness_agents` (and agentrl from this checkout)."""
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{REPO}")


def overrides(cache: Path, out: Path, **extra: Any) -> list[str]:
    base = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": str(cache),
        "data.batch_size": 2,
        "rollout.n": 2,
        "rollout.concurrency": 4,
        "sampling.max_new_tokens": 12,
        "trainer.tensorboard": "false",
        "trainer.steps": 2,
        "trainer.mini_batch_size": 8,
        "trainer.micro_batch_size": 4,
        "trainer.out_dir": str(out),
        "sft.steps": 0,
        "data.eval_episodes": 0,  # the held-out eval runs the agent too: its own tests below
        "rollout.harness.timeout_s": 120,
    }
    base |= {k.replace("__", "."): v for k, v in extra.items()}
    return [f"{k}={v}" for k, v in base.items()]


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preload", ["[]", "[openai]"])
def test_calc_agent_trains_two_grpo_steps(
    agentrl_cache: Path, tmp_path: Path, preload: str
) -> None:
    """The one-line form: two GRPO steps on n=2 runs per task of a tool-calling agent, each
    run a fresh interpreter or forked from a warm parent that imported `openai` once."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:calc_agent", "--env", "math/calc-easy-v0"]
    extra = {"rollout__harness__preload": preload}
    assert main([*args, *overrides(agentrl_cache, out, **extra)]) == 0
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["harness/infra_failed"] == 0
        assert r["harness/episodes"] == 4  # 2 tasks x n=2, every run trained
        assert r["sampled_tokens"] > 0 if "sampled_tokens" in r else True
        assert r["loss"] == r["loss"]  # finite (not NaN)


def test_env_grader_scores_the_agents_answer(agentrl_cache: Path, tmp_path: Path) -> None:
    """An agent whose answers are right gets the env's full reward: the score is the env's
    grader on what the agent returned, not anything the model said."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:answer_agent", "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1)]) == 0
    (row,) = metrics(out)
    assert row["reward/mean"] == 1.0


@pytest.mark.parametrize(
    ("agent", "reason"),
    [("harness_agents:flaky_agent", "agent_crash"), ("harness_agents:stuck_agent", "timeout")],
)
def test_failed_runs_leave_the_groups_not_score_zero(
    agentrl_cache: Path, tmp_path: Path, agent: str, reason: str
) -> None:
    """Runs that crash or hang (odd seeds) are counted as infra failures and kept out of
    training: the step trains only the task whose runs finished, at its true reward 1.0
    (a crash scored 0 would pull the mean to 0.5)."""
    out = tmp_path / "run"
    args = ["train", "--agent", agent, "--env", "math/calc-easy-v0"]
    # 3 s was too short on a busy box; the hanging runs wait it out
    extra = {"trainer__steps": 1, "rollout__harness__timeout_s": 20}
    assert main([*args, *overrides(agentrl_cache, out, **extra)]) == 0
    (row,) = metrics(out)
    assert row[f"harness/failed/{reason}"] == 2
    assert row["harness/infra_failed"] == 2
    assert row["harness/groups_dropped"] == 1
    assert row["harness/episodes"] == 2
    assert row["reward/mean"] == 1.0


def test_a_split_run_is_one_run_of_its_group(agentrl_cache: Path, tmp_path: Path) -> None:
    """The group rule counts runs, not segments (`trainer.exclusion.trainable`, shared with
    the built-in episodes' exclusion): the odd-seed task keeps one finished run recorded as
    two segments beside a crash, too few for GRPO, so it is dropped; the other task trains."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:split_or_crash_agent", "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1)]) == 0
    (row,) = metrics(out)
    assert row["harness/failed/agent_crash"] == 1
    assert row["harness/groups_dropped"] == 1
    assert row["harness/episodes"] == 2 and row["harness/split_episodes"] == 0
    assert row["reward/mean"] == 1.0


def test_split_session_trains_as_one_episode(agentrl_cache: Path, tmp_path: Path) -> None:
    """An agent that rewrites its history mid-episode leaves two segments per session; both
    are trained, token-exact (the trainer's log-probs reproduce the engine's), and carry the
    episode's id, reward and segment count."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:rewriting_agent", "--env", "math/calc-easy-v0"]
    extra = {"trainer__steps": 1, "trainer__dump_rollouts_every": 1}
    assert main([*args, *overrides(agentrl_cache, out, **extra)]) == 0
    (row,) = metrics(out)
    assert row["harness/episodes"] == 4
    assert row["harness/split_episodes"] == 4
    assert row["harness/segments"] == 8
    trajs = [
        json.loads(x) for x in (out / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    ]
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for t in trajs:
        by_episode.setdefault(t["metadata"]["episode"], []).append(t)
    assert len(by_episode) == 4 and all(len(v) == 2 for v in by_episode.values())
    for segs in by_episode.values():
        assert len({s["reward"] for s in segs}) == 1
        assert all(s["metadata"]["episode_segments"] == 2 for s in segs)
        assert segs[0]["prompt_ids"] != segs[1]["prompt_ids"]  # history rewritten
    for t in trajs:
        sampled = [i for i, m in enumerate(t["loss_mask"]) if m]
        assert sampled
        diffs = [abs(t["logprobs"][i] - t["metadata"]["trainer_logprobs"][i]) for i in sampled]
        assert max(diffs) < 1e-3


def test_every_run_failing_is_an_error(agentrl_cache: Path, tmp_path: Path) -> None:
    """A step whose runs all failed stops the run naming the failure; nothing is trained."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:crashing_agent", "--env", "math/calc-easy-v0"]
    with pytest.raises(RuntimeError, match="the agent's own bug"):
        main([*args, *overrides(agentrl_cache, out, trainer__steps=1)])


def test_command_line_agent(agentrl_cache: Path, tmp_path: Path) -> None:
    """`--agent-command`: a program that only reads OPENAI_BASE_URL / OPENAI_API_KEY and
    $AGENTRL_TASK, answering on its last line of stdout, scored by the env's grader."""
    out = tmp_path / "run"
    command = f"{sys.executable} {HERE / 'command_agent.py'}"
    args = ["train", "--agent-command", command, "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1)]) == 0
    (row,) = metrics(out)
    assert row["harness/episodes"] == 4 and row["harness/infra_failed"] == 0
    assert row["reward/mean"] == 1.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["trainer.async.max_staleness=1"], "does not combine with trainer.async.max_staleness"),
        (["sft.steps=2"], "does not combine with sft.steps > 0"),
        (["algorithm.adv_estimator=remax", "rollout.n=1"], "greedy baseline"),
        (["rollout.harness.timeout_s=0"], "rollout.harness.timeout_s"),
        (["rollout.harness.command=[python, a.py]"], "set agent or command, not both"),
        (["rollout.harness.sandbox=docker"], "rollout.harness.sandbox: 'docker' is not one of"),
        (["rollout.harness.sandbox=local"], "rollout.harness.sandbox: local runs a command line"),
        (["rollout.harness.readonly_paths=[rel/dir]"], "'rel/dir' is not absolute"),
    ],
)
def test_what_the_harness_refuses_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """Refused before any model loads, naming the key."""
    args = ["train", "--agent", "harness_agents:calc_agent", "--env", "math/calc-easy-v0"]
    assert main([*args, f"trainer.out_dir={tmp_path / 'run'}", *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


def test_a_preload_that_cannot_be_imported_is_a_config_error(
    agentrl_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found when the warm parent starts (the agent's interpreter, not the trainer's, must
    import it): one line, exit 2, no traceback, no episode run."""
    args = ["train", "--agent", "harness_agents:calc_agent", "--env", "math/calc-easy-v0"]
    extra = {"rollout__harness__preload": "[no_such_module_xyz]"}
    assert main([*args, *overrides(agentrl_cache, tmp_path / "run", **extra)]) == 2
    err = capsys.readouterr().err
    assert "config error: rollout.harness.preload ['no_such_module_xyz']" in err, err
    assert "cannot import 'no_such_module_xyz': ModuleNotFoundError" in err, err
    assert "Traceback" not in err, err


def test_the_agent_cannot_score_itself(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent with full Python posts rewards for its own session, reads the sessions and
    returns a wrong answer claiming reward 1: every admin call is refused (no token reaches
    it) and the env's grader scores the wrong answer 0."""
    probe = tmp_path / "probes.jsonl"
    monkeypatch.setenv("HARNESS_PROBE_FILE", str(probe))
    monkeypatch.setenv("AGENTRL_SERVE_TOKEN", "a-token-the-agent-must-not-see-0123456789")
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:cheating_agent", "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1)]) == 0
    (row,) = metrics(out)
    assert row["reward/mean"] == 0.0 and row["harness/episodes"] == 4
    probes = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(probes) == 4
    for p in probes:
        assert p["reward_root"] == 401 and p["read_all"] == 401
        assert p["reward_session_url"] in (401, 404)
        assert p["token_in_env"] == []


@pytest.mark.parametrize(
    ("agent", "extra", "reward"),
    [
        ("harness_agents:self_graded_agent", {"rollout__harness__reward": "agent"}, 0.5),
        (
            "harness_agents:answer_agent",
            {
                "rollout__harness__reward": "function",
                "rollout__harness__reward_fn": "harness_agents:quarter_reward",
            },
            0.25,
        ),
    ],
)
def test_other_reward_sources(
    agentrl_cache: Path, tmp_path: Path, agent: str, extra: dict[str, Any], reward: float
) -> None:
    """`reward: agent` trains on the reward the program reports; `reward: function` on the
    reward function's score of the answer (the env's grader would give 1.0 to both)."""
    out = tmp_path / "run"
    args = ["train", "--agent", agent, "--env", "math/calc-easy-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1, **extra)]) == 0
    (row,) = metrics(out)
    assert row["reward/mean"] == reward and row["harness/episodes"] == 4


@pytest.mark.parametrize("fix", [True, False])
def test_env_tools_edit_what_the_swe_grader_scores(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fix: bool
) -> None:
    """The SWE env grades the files in its own sandboxed workspace, which an agent process
    cannot touch. Through `task["tools_url"]` the agent calls the env's own tools: the oracle
    edit made that way scores 1.0 from the env's grader (its hidden tests), submitting without
    it scores 0.0, and a call after `submit` (which ended the env's episode) is a 409."""
    import agentrl

    env = agentrl.make("swe/tiny-repo-v0")
    edits = {}
    for i in range(len(env.dataset)):  # type: ignore[attr-defined]
        obs, _ = env.reset(options={"index": i})
        action = env.oracle_action()
        assert action is not None
        edits[obs.messages[-1].content] = action.tool_calls[0].arguments
    env.close()
    edit_file = tmp_path / "edits.json"
    edit_file.write_text(json.dumps(edits if fix else {}))
    probe = tmp_path / "probes.jsonl"
    monkeypatch.setenv("HARNESS_SWE_EDITS", str(edit_file))
    monkeypatch.setenv("HARNESS_PROBE_FILE", str(probe))
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:swe_edit_agent", "--env", "swe/tiny-repo-v0"]
    assert main([*args, *overrides(agentrl_cache, out, trainer__steps=1)]) == 0
    (row,) = metrics(out)
    assert row["harness/infra_failed"] == 0 and row["harness/episodes"] == 4
    assert row["reward/mean"] == (1.0 if fix else 0.0)
    probes = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(probes) == 4
    for p in probes:
        if fix:
            assert p["str_replace"][0] == 200 and "Edited" in p["str_replace"][1]["output"]
        assert p["submit"] == [200, {"output": "Submitted.", "done": True}]
        assert p["after_submit"] == 409


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# The held-out eval of a harness run goes through the agent program, not the env loop:
# what is measured is what is trained.
def test_held_out_eval_runs_the_agent(agentrl_cache: Path, tmp_path: Path) -> None:
    """`--agent` with `data.eval_episodes`: the before/after evals run the agent (right on
    even seeds, a crash on odd ones), scored by the env's grader over all four held-out
    tasks: 0.5, the crashes counted apart. The env's own loop on this random tiny model
    would score 0."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:flaky_agent", "--env", "math/calc-easy-v0"]
    extra = {"trainer__steps": 1, "data__eval_episodes": 4, "rollout__harness__timeout_s": 60}
    assert main([*args, *overrides(agentrl_cache, out, **extra)]) == 0
    before, after = rows(out / "eval.jsonl")
    for r in (before, after):
        assert r["episodes"] == 4
        assert r["success_rate"] == 0.5 and r["reward/mean"] == 0.5
        assert r["harness/infra_failed"] == 2 and r["harness/failed/agent_crash"] == 2
    assert before["step"] == 0 and after["step"] == 1


def test_held_out_eval_is_greedy(agentrl_cache: Path, tmp_path: Path) -> None:
    """The agent sends no temperature; on the eval's gateway the same request twice gives
    the same tokens (the probe answers right only then), so every held-out task is solved,
    while training samples (temperature 1) and the probe's two replies differ."""
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:greedy_probe_agent", "--env", "math/calc-easy-v0"]
    extra = {
        "trainer__steps": 1,
        "data__eval_episodes": 4,
        "rollout__concurrency": 1,
        "rollout__harness__timeout_s": 300,  # a busy box: a timeout would score 0 here
    }
    assert main([*args, *overrides(agentrl_cache, out, **extra)]) == 0
    before, after = rows(out / "eval.jsonl")
    assert before["success_rate"] == 1.0 and after["success_rate"] == 1.0
    (step,) = rows(out / "metrics.jsonl")
    assert step["reward/mean"] < 1.0


def test_held_out_result_never_drops_a_task() -> None:
    """Over every task: a failed run scores 0; a split episode (two segments) counts once;
    its tool calls are those of all its segments."""

    def seg(episode: str, reward: float, calls: int = 0) -> Trajectory:
        t = Trajectory(prompt_ids=[1], reward=reward)
        t.metadata["episode"] = episode
        call = ToolCall(name="calculator", arguments={"expression": "1+2"})
        t.turns.append(Turn(start=0, end=0, obs_end=0, tool_calls=[call] * calls))
        return t

    groups = [
        TrajectoryGroup("a", [seg("a-0", 1.0, calls=1), seg("a-0", 1.0, calls=2)]),
        TrajectoryGroup("b", [seg("b-0", 0.0)]),
        TrajectoryGroup("c", []),
    ]
    failed = [Episode([], Trajectory(prompt_ids=[]), failure="timeout")]
    res = held_out_result(groups, failed, 3, success_at=1.0)
    assert res == {
        "reward": pytest.approx(1 / 3),
        "success_rate": pytest.approx(1 / 3),
        "tool_calls": 1.0,  # 3 calls over 3 tasks
        "episodes": 3.0,
        "harness/infra_failed": 1.0,
        "harness/failed/timeout": 1.0,
    }


@pytest.mark.parametrize("preload", ["[]", "[openai]"])
def test_a_stopped_run_leaves_no_agent_running(
    agentrl_cache: Path, tmp_path: Path, preload: str
) -> None:
    """SIGTERM (a scheduler's stop) while agent programs run: the trainer ends as on Ctrl-C
    (one line, exit 143; Ctrl-C takes the same path) and every agent process is gone, not
    orphaned in its own session, whether it was a fresh interpreter or forked from the warm
    parent (which goes too)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    out = tmp_path / "run"
    args = ["train", "--agent", "harness_agents:pid_hanging_agent", "--env", "math/calc-easy-v0"]
    extra = {"rollout__harness__preload": preload}
    argv = [sys.executable, "-m", "agentrl", *args, *overrides(agentrl_cache, out, **extra)]
    env = os.environ | {"AGENT_PID_DIR": str(pids), "PYTHONPATH": f"{HERE}:{REPO}"}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while len(list(pids.iterdir())) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) == 4, proc.communicate(timeout=60)
    parents = {_ppid(p) for p in started}  # the trainer, or the one warm parent
    assert len(parents) == 1
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr, stderr
    assert [ln for ln in stderr.splitlines() if ln.startswith("interrupted at step 0")], stderr
    deadline = time.monotonic() + 30
    started += [p for p in parents if preload != "[]"]
    while (alive := [p for p in started if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead (its parent is gone, init reaps)
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
