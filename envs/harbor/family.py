"""A Harbor task *family*: many small task folders generated from a seed, split into train
and held-out, so that training on some and evaluating on others measures generalisation.

Five fixed tasks (`data/`) cannot give a held-out split, and a fixed task can be learnt by
heart. `files-v0` is five kinds of one-command shell chores in the working directory, each
with its file names, output name, search word and data drawn from the seed:

    kind   instruction (names and data vary)              oracle command
    sum    `nums.txt`: write their sum to `answer.txt`    echo $(( $(paste -sd+ SRC) )) > OUT
    max    ... the largest of them                        sort -n SRC | tail -1 > OUT
    lines  `notes.txt`: write its number of lines         wc -l < SRC > OUT
    grep   `app.log`: lines that contain `ERROR`          grep -c WORD SRC > OUT
    lower  rename `Notes.MD` to an all-lowercase name     mv Notes.MD notes.md

Every task is a real Harbor folder (instruction.md, task.toml, environment/Dockerfile + the
data file, tests/test.sh writing /logs/verifier/reward.txt with the answer baked in,
solution/solve.sh with the one command), graded only by its tests on the final working
directory. No command solves two kinds, and the names vary, so no one string is the answer.
Only coreutils, grep and bash are used (the local sandbox has no `awk`: Debian's is an
/etc/alternatives link, and the sandbox does not see /etc).

Split rule: a task is held-out when the SHA-256 of its oracle command starts with a byte
that is 0 mod 4 (about a quarter). So no held-out task's command is ever a training task's
command: the held-out tasks pose file-name/kind/word combinations never seen in training.
Which task a reset seed poses: seeds in [heldout_from, 2 * heldout_from) (the trainer's
held-out eval seeds, `data.eval_seed_offset` up, default 1_000_000) draw held-out tasks,
every other seed (training seeds, SFT demo seeds from 2 * offset) draws training tasks;
`split="train"`/`"heldout"` forces one. Within a split, a seed's rng draws tasks until one
falls in that split, so a seed always gives the same task.

Folders are written once into a content-addressed cache (`$AGENTRL_CACHE/harbor-family/`)
and read back as any Harbor task. To look at them, or run them with Harbor itself:

    python -m agentrl.envs.harbor.family DIR --split heldout -n 20
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import HELDOUT_FROM, is_heldout_seed
from .tasks import HarborTask

FAMILIES = ("files-v0",)
SPLITS = ("train", "heldout")
BASE_IMAGE = "agentrl-sandbox:base"  # what the bundled tasks build FROM (docker backend)
_SALT = 0x5EED_F11E  # part of every task's rng seed: a new family version changes it

_NUM_SRC = ("data.txt", "nums.txt", "numbers.txt", "values.txt", "input.txt", "list.txt")
_TEXT_SRC = ("notes.txt", "words.txt", "input.txt", "todo.txt", "names.txt", "items.txt")
_LOG_SRC = ("app.log", "server.log", "run.log", "events.log", "build.log", "jobs.log")
_OUT = ("answer.txt", "result.txt", "out.txt", "total.txt", "count.txt", "output.txt")
_LEVELS = ("ERROR", "WARN", "FAIL", "DEBUG", "TIMEOUT", "INFO")
_WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "orbit")
_BASES = ("report", "notes", "readme", "data", "todo", "photo", "config", "setup", "draft")
_EXTS = ("txt", "md", "csv", "json", "log")
KINDS = ("sum", "max", "lines", "grep", "lower")


@dataclass(frozen=True)
class FamilyTask:
    """One generated task: what the folder holds, before it is written."""

    kind: str
    instruction: str
    command: str  # the oracle: one bash command run in the working directory
    files: dict[str, str]  # the working directory's starting files
    test: str  # tests/test.sh

    @property
    def split(self) -> str:
        return split_of(self.command)

    @property
    def name(self) -> str:
        files = [part for item in sorted(self.files.items()) for part in item]
        blob = "\0".join([self.instruction, self.command, self.test, *files])
        return f"{self.kind}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def split_of(command: str) -> str:
    """The split rule: by the oracle command, so the splits never share one."""
    return "heldout" if hashlib.sha256(command.encode()).digest()[0] % 4 == 0 else "train"


def _reward_test(check: str) -> str:
    return (
        "#!/bin/bash\ncd /app 2>/dev/null || { echo 0 > /logs/verifier/reward.txt; exit 0; }\n"
        f"if {check}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )


def _number_test(out: str, want: int) -> str:
    return _reward_test(f'[ "$(tr -d \'[:space:]\' < {out} 2>/dev/null)" = "{want}" ]')


def _draw(rng: np.random.Generator) -> FamilyTask:
    def pick(xs: tuple[str, ...]) -> str:
        return xs[int(rng.integers(len(xs)))]

    kind, out = pick(KINDS), pick(_OUT)
    if kind in ("sum", "max"):
        src = pick(_NUM_SRC)
        nums = [int(x) for x in rng.integers(1, 100, size=int(rng.integers(3, 9)))]
        what = "their sum" if kind == "sum" else "the largest of them"
        cmd = (
            f"echo $(( $(paste -sd+ {src}) )) > {out}"
            if kind == "sum"
            else f"sort -n {src} | tail -1 > {out}"
        )
        want = sum(nums) if kind == "sum" else max(nums)
        text = f"In /app, the file `{src}` lists whole numbers, one per line. Write "
        text += f"{what} to `{out}` (just the number)."
        return FamilyTask(
            kind, text, cmd, {src: "".join(f"{n}\n" for n in nums)}, _number_test(out, want)
        )
    if kind == "lines":
        src = pick(_TEXT_SRC)
        lines = [pick(_WORDS) for _ in range(int(rng.integers(3, 10)))]
        text = f"In /app, `{src}` is a text file. Write its number of lines to `{out}` "
        text += "(just the number)."
        cmd = f"wc -l < {src} > {out}"
        return FamilyTask(
            kind, text, cmd, {src: "".join(f"{w}\n" for w in lines)}, _number_test(out, len(lines))
        )
    if kind == "grep":
        src, word = pick(_LOG_SRC), pick(_LEVELS)
        n = int(rng.integers(4, 10))
        levels = [pick(_LEVELS) for _ in range(n)]
        levels[int(rng.integers(n))] = word  # at least one line has the word
        log = "".join(f"{lv} {pick(_WORDS)} {i}\n" for i, lv in enumerate(levels))
        text = f"In /app, `{src}` is a log file. Write the number of its lines that contain "
        text += f"`{word}` to `{out}` (just the number)."
        cmd = f"grep -c {word} {src} > {out}"
        return FamilyTask(kind, text, cmd, {src: log}, _number_test(out, levels.count(word)))
    base, ext = pick(_BASES), pick(_EXTS)
    style = int(rng.integers(3))
    name = (
        f"{base.capitalize()}.{ext}"
        if style == 0
        else f"{base.upper()}.{ext.upper()}"
        if style == 1
        else f"{base}.{ext.upper()}"
    )
    lower, content = name.lower(), pick(_WORDS)
    text = f"In /app, rename the file `{name}` so that its whole name is lowercase "
    text += "(keep its content)."
    check = f'[ ! -e "{name}" ] && [ "$(cat "{lower}" 2>/dev/null)" = "{content}" ]'
    return FamilyTask(kind, text, f"mv {name} {lower}", {name: f"{content}\n"}, _reward_test(check))


def generate(seed: int, split: str, family: str = "files-v0") -> FamilyTask:
    """The task a seed poses in `split` (deterministic)."""
    if family not in FAMILIES:
        raise KeyError(f"harbor: no task family {family!r}; known: {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise ValueError(f"harbor family {family}: split {split!r} is not one of {SPLITS}")
    rng = np.random.default_rng([_SALT, int(seed)])
    while True:
        task = _draw(rng)
        if task.split == split:
            return task


def split_for_seed(seed: int, heldout_from: int = HELDOUT_FROM) -> str:
    """Held-out for the trainer's eval seeds [heldout_from, 2 * heldout_from), else train."""
    return "heldout" if is_heldout_seed(seed, heldout_from) else "train"


def write(task: FamilyTask, folder: Path, base_image: str = BASE_IMAGE) -> Path:
    """Write `task` as a Harbor task folder at `folder` (which must not exist)."""
    env = folder / "environment"
    for sub in (env, folder / "tests", folder / "solution"):
        sub.mkdir(parents=True)
    (folder / "instruction.md").write_text(task.instruction + "\n")
    (folder / "task.toml").write_text(
        'schema_version = "1.4"\n\n[metadata]\ncategory = "shell"\n'
        f'family = "files-v0"\nkind = "{task.kind}"\nsplit = "{task.split}"\n\n'
        "[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 30.0\n\n"
        "[environment]\nmemory_mb = 512\n"
    )
    copies = "".join(f"COPY {name} /app/{name}\n" for name in sorted(task.files))
    (env / "Dockerfile").write_text(f"FROM {base_image}\nWORKDIR /app\n{copies}")
    for name, data in task.files.items():
        (env / name).write_text(data)
    (folder / "tests" / "test.sh").write_text(task.test)
    (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{task.command}\n")
    return folder


def cache_root() -> Path:
    return Path(os.environ.get("AGENTRL_CACHE", "~/.cache/agentrl")).expanduser() / "harbor-family"


def materialise(task: FamilyTask, root: Path | None = None) -> Path:
    """The task's folder in the content-addressed cache, written once (atomically, so
    concurrent envs never read half a folder)."""
    root = root or cache_root()
    folder = root / "files-v0" / task.split / task.name
    if (folder / "task.toml").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{task.name}-", dir=folder.parent))
    try:
        write(task, tmp / "t")
        try:
            os.rename(tmp / "t", folder)
        except OSError:  # another process wrote it first: same content
            if not (folder / "task.toml").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load(seed: int, split: str, family: str = "files-v0") -> HarborTask:
    """The HarborTask a seed poses in `split`, read back from its written folder."""
    return HarborTask.load(materialise(generate(seed, split, family)))


def write_split(
    out: Path, split: str, n: int, first_seed: int = 0, base_image: str = BASE_IMAGE
) -> list[Path]:
    """`n` distinct tasks of `split` (seeds from `first_seed` up) as folders under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    seed = first_seed
    while len(written) < n:
        task = generate(seed, split)
        seed += 1
        if not (out / task.name).exists():
            written.append(write(task, out / task.name, base_image))
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.envs.harbor.family", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("out", type=Path, help="folder to write the task folders into (a dataset)")
    p.add_argument("--split", choices=SPLITS, default="train")
    p.add_argument("-n", type=int, default=20, help="how many distinct tasks")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--base-image", default=BASE_IMAGE, help="the Dockerfiles' FROM")
    args = p.parse_args(argv)
    paths = write_split(args.out, args.split, args.n, args.first_seed, args.base_image)
    print(f"wrote {len(paths)} {args.split} tasks of files-v0 under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
