"""Run folders: a new run never destroys a previous one unless asked.

`trainer.out_dir` is either a path (used as given) or a template with `{env}` (the default,
`runs/{env}`: `math/calc-easy-v0` -> `runs/math-calc-easy-v0`). Starting a run where a
previous run's files are:

- template: the run takes the next free numbered folder (`runs/math-calc-easy-v0-2`, ...);
- explicit path: refused with one line that points to `--resume` (continue it),
  `--overwrite` (replace it) or another `trainer.out_dir`.

`--overwrite` removes only the files a run writes (`RUN_FILES`), so nothing else a user put
in the folder goes. `--resume` on a template continues its newest numbered folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from agentrl.config import ConfigError

# Everything a training run writes into its folder.
RUN_FILES = (
    "metrics.jsonl",
    "eval.jsonl",
    "untouched.jsonl",
    "sft.jsonl",
    "run.json",
    "checkpoints",
    "tensorboard",
    "plots",
    "rollouts",
    "wandb",
    "final",
)


class RunDirError(ConfigError):
    """The run folder holds a previous run and the command did not say what to do with it."""


def is_template(out_dir: str) -> bool:
    return "{env}" in out_dir


def expand(out_dir: str, env: str) -> Path:
    """`runs/{env}` -> `runs/math-calc-easy-v0` (a path without `{env}` is returned as is)."""
    return Path(out_dir.replace("{env}", re.sub(r"[^A-Za-z0-9_.\-]+", "-", env)))


def previous_run(out: Path) -> list[str]:
    """The run files present in `out` (empty: no previous run there)."""
    return [name for name in RUN_FILES if (out / name).exists()]


def has_checkpoint(out: Path) -> bool:
    return (out / "checkpoints" / "latest").exists()


def _numbered(base: Path) -> list[Path]:
    """`base`, `base-2`, `base-3`, ... that exist, in order."""
    found = [base] if base.exists() else []
    pattern = re.compile(re.escape(base.name) + r"-(\d+)$")
    if base.parent.exists():
        extra = [
            (int(m.group(1)), p) for p in base.parent.iterdir() if (m := pattern.match(p.name))
        ]
        found += [p for _, p in sorted(extra)]
    return found


def resolve(out_dir: str, env: str, *, resume: bool = False, overwrite: bool = False) -> Path:
    """The folder this run writes to (see the module docstring); raises `RunDirError`."""
    base = expand(out_dir, env)
    template = is_template(out_dir)
    if resume:
        if template:
            existing = [p for p in _numbered(base) if previous_run(p)]
            base = existing[-1] if existing else base
        claim(base, resume=True, overwrite=False, dry_run=True)
        return base
    if overwrite or not previous_run(base):
        return base
    if template:
        n = 2
        while previous_run(base.with_name(f"{base.name}-{n}")):
            n += 1
        return base.with_name(f"{base.name}-{n}")
    claim(base, resume=False, overwrite=False, dry_run=True)
    return base


def claim(out: Path, *, resume: bool, overwrite: bool, dry_run: bool = False) -> None:
    """Make `out` ready for this run: refuse a previous run nobody asked about, or clear it
    (`overwrite`). With `resume`, a folder with run files but no checkpoint is refused."""
    found = previous_run(out)
    if resume:
        if found and not has_checkpoint(out):
            raise RunDirError(
                f"--resume: {out} has no checkpoint to continue (it holds {', '.join(found)}); "
                f"pass --overwrite to start over there, or drop --resume"
            )
        return
    if not found:
        return
    if not overwrite:
        step = _last_checkpoint(out)
        ckpt = f", checkpoint {step}" if step else ""
        raise RunDirError(
            f"trainer.out_dir {out} holds a previous run ({', '.join(found)}{ckpt}): pass "
            f"--resume to continue it, --overwrite to replace it, or trainer.out_dir=NEW_DIR"
        )
    if not dry_run:
        for name in found:
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _last_checkpoint(out: Path) -> str:
    pointer = out / "checkpoints" / "latest"
    return pointer.read_text().strip() if pointer.exists() else ""


def start_session(out: Path, started: float, setup_s: float) -> None:
    """Record in `run.json` that a session (a fresh run or a resume) started at `started`
    (unix s) and spent `setup_s` building models and engines; `agentrl runs show` adds the
    sessions up for the true wall time."""
    info = _read_info(out)
    info.setdefault("sessions", []).append({"start": started, "setup_s": setup_s, "end": None})
    _write_info(out, info)


def end_session(out: Path) -> None:
    info = _read_info(out)
    if info.get("sessions"):
        info["sessions"][-1]["end"] = time.time()
        _write_info(out, info)


def _read_info(out: Path) -> dict:
    path = out / "run.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_info(out: Path, info: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "run.json.tmp"
    tmp.write_text(json.dumps(info, indent=1), encoding="utf-8")
    os.replace(tmp, out / "run.json")


# ------------------------------------------------------------------ resume with a changed config
# Keys whose new value a resumed run does NOT use: the weights come back from the checkpoint's
# model state. (The optimizer's lr, betas and weight decay are the config's again after loading,
# `actor.apply_optim_config`; only Adam's moments and the schedule's position are restored.)
RESTORED_BY_CHECKPOINT = ("model.path",)
# Keys a resumed run is expected to change without comment.
_RESUME_QUIET = ("trainer.steps", "trainer.out_dir", "data.env_modules")


def _flat(tree: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, object] = {}
    for k, v in tree.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def resume_changes(out: Path, cfg: object) -> list[str]:
    """Dotted keys whose value in `cfg` differs from the run's saved `config.yaml`."""
    import yaml

    from agentrl.config import to_dict

    saved_file = out / "config.yaml"
    if not saved_file.exists():
        return []
    saved = _flat(json.loads(json.dumps(yaml.safe_load(saved_file.read_text()), default=str)))
    new = _flat(json.loads(json.dumps(to_dict(cfg), default=str)))
    keys = sorted(k for k in saved.keys() | new.keys() if saved.get(k) != new.get(k))
    return [k for k in keys if not k.startswith(_RESUME_QUIET)]


def resume_diff(out: Path, cfg: object) -> list[tuple[str, object, object]]:
    """`(key, saved value, new value)` for every dotted key where `cfg` differs from the run's
    saved `config.yaml` (`trainer.out_dir` and `data.env_modules` aside: paths the command
    line resolves); what `agentrl train --resume` lists before it starts."""
    import yaml

    from agentrl.config import to_dict

    saved_file = out / "config.yaml"
    if not saved_file.exists():
        return []
    saved = _flat(json.loads(json.dumps(yaml.safe_load(saved_file.read_text()), default=str)))
    new = _flat(json.loads(json.dumps(to_dict(cfg), default=str)))
    keys = sorted(k for k in saved.keys() | new.keys() if saved.get(k) != new.get(k))
    quiet = ("trainer.out_dir", "data.env_modules")
    return [(k, saved.get(k), new.get(k)) for k in keys if not k.startswith(quiet)]


def resume_warning(changed: list[str]) -> str | None:
    """One line for `--resume` with a changed config: which keys changed, which of them the
    checkpoint's state overrides (docs/troubleshooting.md, "Resuming")."""
    if not changed:
        return None
    kept = [k for k in changed if k.startswith(RESTORED_BY_CHECKPOINT)]
    line = f"warning: --resume with a changed config ({', '.join(changed)})"
    if kept:
        line += (
            f"; the checkpoint's state overrides {', '.join(kept)} (its weights are "
            "restored): start a new run (or --overwrite) to use the new values"
        )
    return line
