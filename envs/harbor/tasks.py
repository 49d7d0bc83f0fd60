"""Harbor task folders, read as Harbor lays them out (the `harbor` package, 0.25):

    task/
    ├── instruction.md          the prompt
    ├── task.toml               [agent] timeout_sec, [verifier] timeout_sec + env,
    │                           [environment] cpus, memory_mb, storage_mb, workdir, env, ...
    ├── environment/Dockerfile  the image (build context: environment/)
    ├── solution/solve.sh       the oracle (Harbor copies it to /solution, OracleAgent only)
    └── tests/test.sh           copied to /tests after the agent ran, run from the working
                                directory; writes /logs/verifier/reward.txt (a float) or
                                reward.json ({"name": number, ...}; preferred when both exist)

A dataset is a folder whose subfolders are task folders. `bundled` names the small offline
tasks shipped in `data/`.

The Dockerfile is read here only for what the local backend can reproduce without building an
image: `FROM` (ignored), `WORKDIR`, `ENV`, and `COPY`/`ADD` of build-context files into the
working directory. Anything else (`RUN`, a copy elsewhere) makes the task docker-only, and
`local_blocker` says which line.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10: the tomli backport (an agentrl dependency there)
    import tomli as tomllib

DATA = Path(__file__).parent / "data"
DEFAULT_WORKDIR = "/app"  # Harbor's template task and its exec defaults


class TaskError(ValueError):
    """A folder that is not a usable Harbor task; the message names the file."""


def _files(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@dataclass
class DockerfilePlan:
    """What a Dockerfile does that the local backend can redo, and the first thing it can't."""

    workdir: str = DEFAULT_WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[str, str]] = field(default_factory=list)  # (context src, dest)
    blocker: str | None = None


def plan_dockerfile(text: str) -> DockerfilePlan:
    plan = DockerfilePlan()
    lines = re.sub(r"\\\n", " ", text).splitlines()
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            continue
        if op == "WORKDIR":
            plan.workdir = rest if rest.startswith("/") else f"{plan.workdir}/{rest}"
        elif op == "ENV":
            words = shlex.split(rest)
            if words and "=" not in words[0]:  # legacy `ENV KEY value`
                plan.env[words[0]] = " ".join(words[1:])
            else:
                plan.env.update(dict(w.split("=", 1) for w in words if "=" in w))
        elif op in ("COPY", "ADD") and not rest.startswith("--"):
            *srcs, dest = shlex.split(rest)
            dest = dest if dest.startswith("/") else f"{plan.workdir}/{dest}"
            plan.copies += [(s, dest) for s in srcs]
        elif plan.blocker is None:
            plan.blocker = f"Dockerfile line {n}: {line[:80]!r}"
    return plan


@dataclass
class HarborTask:
    """One task folder, loaded."""

    path: Path
    name: str
    instruction: str
    config: dict[str, Any]
    dockerfile: str | None
    tests: dict[str, bytes]
    solution: dict[str, bytes]

    @classmethod
    def load(cls, path: Path) -> HarborTask:
        path = Path(path).resolve()
        for need in ("instruction.md", "task.toml", "tests/test.sh"):
            if not (path / need).is_file():
                raise TaskError(f"{path}: not a Harbor task folder (no {need})")
        try:
            config = tomllib.loads((path / "task.toml").read_text())
        except tomllib.TOMLDecodeError as e:
            raise TaskError(f"{path / 'task.toml'}: {e}") from None
        docker = path / "environment" / "Dockerfile"
        return cls(
            path,
            path.name,
            (path / "instruction.md").read_text(),
            config,
            docker.read_text() if docker.is_file() else None,
            _files(path / "tests"),
            _files(path / "solution"),
        )

    def section(self, name: str) -> dict[str, Any]:
        value = self.config.get(name, {})
        if not isinstance(value, dict):
            raise TaskError(f"{self.path / 'task.toml'}: [{name}] must be a table")
        return value

    def _number(self, section: str, key: str, default: float | None) -> float | None:
        value = self.section(section).get(key, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise TaskError(f"{self.path / 'task.toml'}: {section}.{key}: expected a number")
        if value is not None and value <= 0:
            raise TaskError(f"{self.path / 'task.toml'}: {section}.{key}: must be > 0")
        return value

    @property
    def agent_timeout_s(self) -> float | None:
        return self._number("agent", "timeout_sec", None)

    @property
    def verifier_timeout_s(self) -> float:
        return float(self._number("verifier", "timeout_sec", 600.0) or 600.0)

    @property
    def cpus(self) -> float | None:
        return self._number("environment", "cpus", None)

    @property
    def memory_mb(self) -> int | None:
        mb = self._number("environment", "memory_mb", None)
        return None if mb is None else int(mb)

    @property
    def storage_mb(self) -> int | None:
        mb = self._number("environment", "storage_mb", None)
        return None if mb is None else int(mb)

    @property
    def verifier_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.section("verifier").get("env", {}).items()}

    @property
    def plan(self) -> DockerfilePlan:
        if self.dockerfile is None:
            return DockerfilePlan(blocker="no environment/Dockerfile")
        return plan_dockerfile(self.dockerfile)

    @property
    def workdir(self) -> str:
        return str(self.section("environment").get("workdir") or self.plan.workdir)

    def local_blocker(self) -> str | None:
        """Why the local backend cannot reproduce this task's environment (None: it can)."""
        if self.section("environment").get("docker_image"):
            return "task.toml names a prebuilt environment.docker_image"
        plan = self.plan
        if plan.blocker:
            return plan.blocker
        for _, dest in plan.copies:
            if not (dest == self.workdir or dest.startswith(self.workdir.rstrip("/") + "/")):
                return f"Dockerfile copies into {dest}, outside the working dir {self.workdir}"
        return None

    def local_tree(self) -> dict[str, bytes]:
        """The working directory's files as the Dockerfile's COPY/ADD lines put them."""
        blocker = self.local_blocker()
        if blocker:
            raise TaskError(
                f"{self.path}: the local backend cannot build it ({blocker}); use backend='docker'"
            )
        context, tree = self.path / "environment", {}
        root = self.workdir.rstrip("/")
        for src, dest in self.plan.copies:
            rel_dest = dest[len(root) :].strip("/")
            source = (context / src).resolve()
            if not source.is_relative_to(context.resolve()) or not source.exists():
                raise TaskError(f"{self.path}: Dockerfile COPY {src}: not in environment/")
            if source.is_dir():
                for name, data in _files(source).items():
                    tree[f"{rel_dest}/{name}".lstrip("/")] = data
            else:
                into_dir = dest.endswith("/") or not rel_dest
                name = f"{rel_dest}/{source.name}" if into_dir else rel_dest
                tree[name.lstrip("/")] = source.read_bytes()
        return tree


def load_tasks(target: str | Path) -> list[HarborTask]:
    """A task folder, a dataset folder of them, or `bundled[/NAME]`."""
    text = str(target)
    if text == "bundled" or text.startswith("bundled/"):
        path = DATA / text[len("bundled") :].lstrip("/")
    else:
        path = Path(text).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"harbor:{text}: no such folder ({path})")
    if (path / "task.toml").is_file():
        return [HarborTask.load(path)]
    tasks = [HarborTask.load(p) for p in sorted(path.iterdir()) if (p / "task.toml").is_file()]
    if not tasks:
        raise TaskError(f"harbor:{text}: {path} holds no task folder (none has a task.toml)")
    return tasks


def bundled_names() -> list[str]:
    return sorted(p.name for p in DATA.iterdir() if (p / "task.toml").is_file())
