"""Who may import whom (CONTRIBUTING.md, "Rooms"), checked on the source with `ast`.

The rooms below the core, each importing only downward:

    envs/       -> agentrl.types, agentrl.rows (the row contract), tools/, sandboxes/
    tools/      -> agentrl.types, sandboxes/
    sandboxes/  -> agentrl.types
    agentrl.types, agentrl.rows -> agentrl.types (rows also finds env classes by id)
    configs/    -> nothing (YAML only)

The core (the rest of `agentrl/`) reaches envs only through the registry (`agentrl.envs`:
`make`, `spec`, `registry`, ...; `agentrl.envs.registration`; `agentrl.envs.interop` for
prefixed ids), tools only through the tool API (`agentrl.tools.core`), and sandboxes not at
all; EXCEPTIONS lists the few justified arrows. A name with a leading underscore is private
to its module: importing one from another module fails (PRIVATE_OK lists the exceptions);
a private module (`sandboxes/_io.py`) is imported only within its own package.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"agentrl": "agentrl", "envs": "agentrl.envs", "tools": "agentrl.tools"}
ROOTS |= {"sandboxes": "agentrl.sandboxes", "configs": "agentrl.configs"}
LOWER = ("envs", "tools", "sandboxes", "configs")

# room -> the modules (prefixes) it may import from agentrl
ALLOWED: dict[str, tuple[str, ...]] = {
    "envs": ("agentrl.types", "agentrl.rows", "agentrl.envs", "agentrl.tools", "agentrl.sandboxes"),
    "tools": ("agentrl.types", "agentrl.tools", "agentrl.sandboxes"),
    "sandboxes": ("agentrl.types", "agentrl.sandboxes"),
    "configs": (),
    "types": (),
    "rows": ("agentrl.types", "agentrl.envs"),
}
CORE_MAY_REACH = ("agentrl.envs", "agentrl.envs.registration", "agentrl.envs.interop")
CORE_MAY_REACH += ("agentrl.tools.core",)

# (file, imported module) -> why the arrow is there
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("agentrl/models/tiny.py", "agentrl.tools.calculator"): "the tiny models' tokenizer is "
    "trained on a calculator tool call, so the quickstart's tool schema is in its vocabulary",
    ("agentrl/doctor/stack.py", "agentrl.sandboxes._seccomp"): "`agentrl doctor` reports why "
    "the seccomp filter cannot load (the sandbox's own diagnosis, not a second copy)",
    ("agentrl/rollout/harness.py", "agentrl.sandboxes.command"): "a harness rollout with "
    "`rollout.harness.sandbox: local` runs the user's agent command in the sandbox that "
    "reaches only the in-process gateway's port (the trainer owns that port and the relay)",
}
# (file, imported module, name): private names imported across modules, with the reason
PRIVATE_OK: dict[tuple[str, str, str], str] = {
    **{
        ("sandboxes/_runner.py", "agentrl.sandboxes._harness", n): "one in-sandbox program in "
        "two files (concatenated into one source there); underscores keep its names out of "
        "the sandboxed program's `from __main__ import *`"
        for n in (
            "_cells _close_all_but _drop _drop_caps _exit _finish _libc _libc_call _read_frame "
            "_run_program _setup _START_ENV"
        ).split()
    },
    **{
        (f, m, n): "one in-sandbox program in four files (_harness, _wire, _judge, _runner: "
        "concatenated into one source there); underscores keep its names out of the "
        "sandboxed program's `from __main__ import *`"
        for f, m, names in (
            ("sandboxes/_runner.py", "agentrl.sandboxes._judge", "_run_tests"),
            (
                "sandboxes/_judge.py",
                "agentrl.sandboxes._harness",
                "_close_all_but _exit _fail _libc_call _main_module _read_frame _report _write",
            ),
            (
                "sandboxes/_judge.py",
                "agentrl.sandboxes._wire",
                "_dec _enc _hx _recv _Ref _send _unhx",
            ),
            ("sandboxes/_wire.py", "agentrl.sandboxes._harness", "_read_exact"),
            ("sandboxes/_runner.py", "agentrl.sandboxes._wire", "_json _send"),
        )
        for n in names.split()
    },
    # Issue #20: files being rewritten by other work; the lead clears these after merging.
    **{
        (f"agentrl/algorithms/{f}.py", "agentrl.algorithms.losses", n): "pending (#20 wiring)"
        for f, names in (
            ("surrogates", "_log_ratio _ratio_metrics _weighted"),
            ("cov_losses", "_clip_surrogate _log_ratio _ratio_metrics _weighted"),
        )
        for n in names.split()
    },
}


def _modules() -> dict[str, tuple[str, Path]]:
    """Installed module name -> (its room, its file)."""
    out = {}
    for folder, package in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            room = folder if folder in LOWER else "core"
            if name in ("agentrl.types", "agentrl.rows"):
                room = name.split(".")[1]
            out[name] = (room, path)
    return out


def _imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module, names) for every import statement in `path`, lazy ones included."""
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                module = ".".join([*base, *([module] if module else [])])
            found.append((module, [a.name for a in node.names]))
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_rooms_import_only_downward() -> None:
    bad = []
    for name, (room, path) in _modules().items():
        rel = str(path.relative_to(REPO))
        own = ROOTS[path.relative_to(REPO).parts[0]]
        for module, names in _imports(name, path):
            if not module.startswith("agentrl"):
                continue
            targets = [module] + [f"{module}.{n}" for n in names]  # `from agentrl import envs`
            if (rel, module) in EXCEPTIONS:
                continue
            if room == "core":
                lower = [t for t in targets if _within(t, tuple(ROOTS[r] for r in LOWER))]
                if lower and module not in CORE_MAY_REACH and module != "agentrl":
                    bad.append(f"{rel}: imports {module} (core reaches envs by registry id)")
            elif not _within(module, ALLOWED[room]) and not _within(module, (own,)):
                bad.append(f"{rel}: imports {module} ({room} may import {ALLOWED[room]})")
    assert not bad, "\n".join(bad)


def test_private_names_stay_in_their_module() -> None:
    modules = _modules()
    bad = []
    for name, (_, path) in modules.items():
        rel = str(path.relative_to(REPO))
        for module, names in _imports(name, path):
            if not module.startswith("agentrl") or module == name:
                continue
            parts = module.split(".")
            hidden = [i for i, p in enumerate(parts) if p.startswith("_") and i]
            outside = hidden and not name.startswith(".".join(parts[: hidden[0]]) + ".")
            if outside and (rel, module) not in EXCEPTIONS:
                bad.append(f"{rel}: imports the private module {module}")
            for n in names:
                private = n.startswith("_") and not n.startswith("__")
                own_module = f"{module}.{n}" in modules and name.startswith(module + ".")
                if private and not own_module and (rel, module, n) not in PRIVATE_OK:
                    bad.append(f"{rel}: from {module} import {n}")
    assert not bad, "give these a public name in their module:\n" + "\n".join(bad)


def test_exceptions_are_still_needed() -> None:
    """An exception whose import is gone is deleted, so the list stays the true one."""
    seen = set()
    for name, (_, path) in _modules().items():
        rel = str(path.relative_to(REPO))
        for module, names in _imports(name, path):
            seen.add((rel, module))
            seen.update((rel, module, n) for n in names)
    stale = [k for k in [*EXCEPTIONS, *PRIVATE_OK] if k not in seen]
    assert not stale, f"remove from {Path(__file__).name}: {stale}"
