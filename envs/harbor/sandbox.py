"""Where a Harbor task runs: its environment as a sandbox backend plus a workspace snapshot,
and the verifier run that scores an episode.

Why a snapshot and not a long-lived container: agentrl's sandboxes run each command in a fresh,
locked-down sandbox with the workspace shipped in and its changes shipped back
(`sandboxes.workspace`), so an episode resets in O(1) and nothing of it outlives its commands.
A Harbor task's environment becomes (1) the files of its working directory, the snapshot, and
(2) a backend: `local` (bubblewrap) when the Dockerfile only copies files into the working
directory, or `docker` with the task's image built locally from `environment/`. An image
with its own userland (a `/bin/sh`: `FROM ubuntu`, `RUN apt-get ...`, `COPY tool
/usr/local/bin/`) runs as itself: the backend's `image_userland` mode keeps its `/usr`,
`/bin`, `/lib`, `/etc` and moves the host's runner aside, and commands get the image's `ENV`
(its `PATH`, so `python` is the image's). An image without one (`FROM agentrl-sandbox:base`,
the bundled tasks) gets the host's `/usr` and Python bound in, as every agentrl sandbox.

Paths. Inside every sandbox the working directory is `/work/repo`, and `/tests`, `/solution`
and `/logs` are `/work/tests`, `/work/solution`, `/work/logs`: those absolute prefixes (and the
task's workdir, e.g. `/app`) are rewritten in the instruction, the tests and the solution.

Verification (`verify`): a *fresh* sandbox of the same backend gets the episode's final tree in
`/work/repo` and the tests in `/work/tests` (never shipped before), runs `bash test.sh` from the
working directory with the task's verifier env and `[verifier] timeout_sec`, and reads
`/work/logs/verifier/reward.json` (preferred, as Harbor does) or `reward.txt`, and only when
`test.sh` ended on its own (a timeout or a kill by signal earns 0: the agent's code, run by the
tests, could write a reward file and kill the script before it wrote its own), and only a
reward file that the task's test files name (when they name one of the two: else Harbor's rule
holds, json first), so a `reward.json` forged beside a task's `reward.txt` is not read, and only
when no process of the run outlived `test.sh` or left its process group (the verifier is the
orphans' subreaper, so a double-forked daemon is seen even once it died): such a process could
rewrite the reward file after `test.sh` wrote it. Beyond that, trust is Harbor's: the tests
run next to the agent's code, as the same user, so a reward is as sound as the task's tests
(Harbor's own rule: test.sh writes the reward last, on every path).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import re
import secrets
import tarfile
import threading
from dataclasses import dataclass, field
from typing import Any

from agentrl.sandboxes import ExecRequest, SandboxBackend, get_backend
from agentrl.sandboxes.workspace import ROOT, command_env

from .tasks import HarborTask, TaskError

REWARD_FILES = ("reward.json", "reward.txt")
MAPPED = {"/tests": "/work/tests", "/solution": "/work/solution", "/logs": "/work/logs"}
_DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # docker's default


def rewrite(text: str, workdir: str) -> str:
    """Task paths to sandbox paths (`/app/x` -> `/work/repo/x`, `/tests` -> `/work/tests`)."""
    pairs = {workdir.rstrip("/") or "/": ROOT, **MAPPED}
    for src, dst in sorted(pairs.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![\w.\-/]){re.escape(src)}(?![\w.\-])", dst, text)
    return text


def _text_map(files: dict[str, bytes], workdir: str) -> dict[str, bytes]:
    out = {}
    for name, data in files.items():
        try:
            out[name] = rewrite(data.decode(), workdir).encode()
        except UnicodeDecodeError:
            out[name] = data  # binary fixtures travel as they are
    return out


@dataclass
class Environment:
    """A task's environment, built once per env instance and shared by its episodes."""

    backend: SandboxBackend
    tree: dict[str, bytes]
    env: dict[str, str] = field(default_factory=dict)


_BUILT: dict[tuple[str, str, str], Environment] = {}
_BACKENDS: dict[tuple[Any, ...], SandboxBackend] = {}
_LOCK = threading.Lock()


def build(task: HarborTask, backend: str) -> Environment:
    """The task's environment, built once per process: the trainer makes an env per episode,
    and a backend with its own limits (a sandbox pool) or an image must not be made per
    episode. Keyed by the environment folder's content, so an edited task is rebuilt."""
    if backend not in ("local", "docker"):
        raise ValueError(f"harbor: unknown backend {backend!r} (local or docker)")
    key = (str(task.path), backend, _digest(task))
    with _LOCK:
        if key not in _BUILT:
            _BUILT[key] = _build(task, backend)
        return _BUILT[key]


def _build(task: HarborTask, backend: str) -> Environment:
    knobs: dict[str, Any] = {}
    if task.cpus is not None:
        knobs["cpus"] = float(task.cpus)
    if task.storage_mb is not None:
        knobs["disk_mb"] = task.storage_mb
    plan_env = task.plan.env if task.dockerfile else {}
    if backend == "local":
        return Environment(_backend("local", **knobs), task.local_tree(), plan_env)
    tag, tree, image_env = _docker_image(task)
    if image_env is None:  # no userland of its own: the host's stands in
        return Environment(_backend("docker", image=tag, pool_size=0, **knobs), tree, plan_env)
    own = _backend("docker", image=tag, pool_size=0, image_userland=True, **knobs)
    return Environment(own, tree, {"PATH": _DOCKER_PATH, **image_env, **plan_env})


def _backend(name: str, **knobs: Any) -> SandboxBackend:
    """One backend per (kind, limits), shared by every task that asks for the same ones; the
    shared default when the task sets none."""
    if not knobs:
        return get_backend(name)
    key = (name, *sorted(knobs.items()))
    if key not in _BACKENDS:
        _BACKENDS[key] = get_backend(name, **knobs)
    return _BACKENDS[key]


def _digest(task: HarborTask) -> str:
    digest = hashlib.sha1(task.dockerfile.encode() if task.dockerfile else b"")
    for p in sorted((task.path / "environment").rglob("*")):
        if p.is_file():
            digest.update(p.relative_to(task.path).as_posix().encode() + b"\0" + p.read_bytes())
    digest.update(repr(sorted(task.section("environment").items())).encode())
    return digest.hexdigest()[:12]


def _docker_image(task: HarborTask) -> tuple[str, dict[str, bytes], dict[str, str] | None]:
    """Build `environment/` into a local image (no pulls: its FROM must exist locally, e.g.
    `agentrl-sandbox:base`) and read the working directory's files out of it; the image's
    `ENV` when it has a userland of its own (a `/bin/sh`), else None."""
    import docker

    if task.dockerfile is None:
        raise TaskError(f"{task.path}: no environment/Dockerfile to build")
    tag = f"agentrl-harbor-{re.sub(r'[^a-z0-9_.-]', '-', task.name.lower())}:{_digest(task)}"
    timeout = float(task.section("environment").get("build_timeout_sec", 600.0))
    with contextlib.closing(docker.from_env(timeout=max(30, int(timeout)))) as client:
        return _build_and_read(client, task, tag)


def _build_and_read(
    client: Any, task: HarborTask, tag: str
) -> tuple[str, dict[str, bytes], dict[str, str] | None]:
    import docker

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        try:
            client.images.build(
                path=str(task.path / "environment"),
                tag=tag,
                rm=True,
                pull=False,
                network_mode="none",
                labels={"agentrl.harbor": task.name},
            )
        except docker.errors.BuildError as e:
            log = "".join(str(c.get("stream", c.get("error", ""))) for c in e.build_log)[-800:]
            raise TaskError(f"{task.path}: docker build failed: {e.msg}\n{log}") from None
    box = client.containers.create(tag, command=["/nonexistent"], network_disabled=True)
    try:
        env = None
        with contextlib.suppress(docker.errors.NotFound):
            box.get_archive("/bin/sh")  # resolved in the image (`/bin` may be a link)
            pairs = client.images.get(tag).attrs["Config"].get("Env") or []
            env = dict(e.split("=", 1) for e in pairs if "=" in e)
        try:
            stream, _ = box.get_archive(task.workdir.rstrip("/") + "/.")
        except docker.errors.NotFound:
            return tag, {}, env
        tar = tarfile.open(fileobj=io.BytesIO(b"".join(stream)))
        tree = {}
        for member in tar.getmembers():
            name = member.name.lstrip("./")
            if member.isfile() and name:
                handle = tar.extractfile(member)
                tree[name] = handle.read() if handle else b""
        return tag, tree, env
    finally:
        box.remove(force=True)


_VERIFY = r"""
import ctypes, json, os, subprocess
cfg = json.loads(CFG)
for d in ("/work/logs/verifier", "/work/logs/agent", "/work/logs/artifacts"):
    os.makedirs(d, exist_ok=True)
os.chdir("/work/repo")

def procs():
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open("/proc/" + d + "/stat").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (fields[0], int(fields[2]))  # state, process group
    return out

try:  # orphans of the run (a double-forked daemon) come to us, so even dead ones are seen
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
before = set(procs()) | {os.getpid()}
log = "/work/logs/verifier/test-stdout.txt"
with open(log, "wb") as out:
    proc = subprocess.Popen(["bash", "/work/tests/test.sh"], stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=cfg["timeout"])
    except subprocess.TimeoutExpired:
        rc = None
    left = [pid for pid, (state, group) in procs().items() if pid not in before
            and (group != proc.pid or state not in "ZX")]
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        pass
    for pid in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    proc.wait()
report = {"rc": rc, "left": len(left), "log": open(log, errors="replace").read()[-4000:]}
for name in ("reward.json", "reward.txt"):
    path = "/work/logs/verifier/" + name
    if os.path.isfile(path):
        report[name] = open(path, errors="replace").read(100000)
print(cfg["mark"] + json.dumps(report))
"""


@dataclass
class Verdict:
    reward: float
    rewards: dict[str, float]
    exit_code: int | None
    log: str
    error: str = ""


def verify(task: HarborTask, env: Environment, tree: dict[str, bytes]) -> Verdict:
    """Run the task's tests on `tree` (the episode's final working directory) in a fresh
    sandbox; the reward is what the tests wrote, 0 with `error` set when they wrote none."""
    mark = "\x1e" + secrets.token_hex(8) + ":"
    timeout = task.verifier_timeout_s
    cfg = json.dumps({"timeout": timeout, "mark": mark})
    files: dict[str, str | bytes] = {f"repo/{p}": b for p, b in tree.items()}
    files.update({f"tests/{p}": b for p, b in _text_map(task.tests, task.workdir).items()})
    req = ExecRequest(
        f"CFG = {cfg!r}\n" + _VERIFY,
        files=files,
        timeout_s=timeout + 15.0,
        memory_mb=task.memory_mb or 1024,
        env={**command_env(), **env.env, **task.verifier_env},
    )
    res = env.backend.run(req)
    _, sep, tail = res.stdout.rpartition(mark)
    if not sep:
        why = f"verifier sandbox ended with {res.status}: {res.stderr[-400:]}"
        return Verdict(0.0, {}, res.exit_code, res.stdout[-2000:], why)
    report = json.loads(tail.splitlines()[0])
    rc = report["rc"]
    if rc is None or rc < 0:  # a reward file counts only if test.sh ran to its own end
        why = "timed out" if rc is None else f"was killed by signal {-rc}"
        return Verdict(0.0, {}, rc, report["log"], f"the tests {why}; no reward")
    if report["left"]:  # it could have written a reward file after test.sh wrote its own
        why = f"{report['left']} process(es) of the tests' run outlived test.sh or left its group"
        return Verdict(0.0, {}, rc, report["log"], f"{why}; no reward")
    named = [n for n in REWARD_FILES if any(n.encode() in b for b in task.tests.values())]
    for name in set(REWARD_FILES) - set(named or REWARD_FILES):
        report.pop(name, None)  # a file no test names is not the tests' (the agent's code?)
    rewards, error = _parse_rewards(report)
    reward = rewards.get("reward", next(iter(rewards.values()), 0.0)) if rewards else 0.0
    if len(rewards) > 1 and "reward" not in rewards:
        error = error or f"reward.json has several rewards and no 'reward' key: {sorted(rewards)}"
        reward = 0.0
    return Verdict(float(reward), rewards, report["rc"], report["log"], error)


def _parse_rewards(report: dict[str, Any]) -> tuple[dict[str, float], str]:
    """Harbor's reading: reward.json (a number or {name: number}) wins over reward.txt."""
    if "reward.json" in report:
        try:
            value = json.loads(report["reward.json"])
        except json.JSONDecodeError as e:
            return {}, f"reward.json is not JSON: {e}"
        values = value if isinstance(value, dict) else {"reward": value}
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                return {}, f"reward.json: {k}: {v!r} is not a finite number"
        return {str(k): float(v) for k, v in values.items()}, ""
    if "reward.txt" in report:
        try:
            value = float(report["reward.txt"].strip())
        except ValueError:
            return {}, f"reward.txt is not a number: {report['reward.txt'][:80]!r}"
        if not math.isfinite(value):
            return {}, f"reward.txt: {value} is not finite"
        return {"reward": value}, ""
    return {}, "the tests wrote no reward file (/logs/verifier/reward.txt or reward.json)"
