"""`agentrl envs list|check`: discover and validate registered environments."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "envs", help="list and check environments", formatter_class=RichHelpFormatter
    )
    s = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    lst = s.add_parser("list", help="list registered env ids", formatter_class=RichHelpFormatter)
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.add_argument("--env-module", action="append", default=[], help="also load this file")
    lst.add_argument(
        "--all",
        action="store_true",
        help="also list the id prefixes (harbor:, ors:, gym:, ...) and what each reaches here",
    )
    lst.set_defaults(func=cmd_list)
    chk = s.add_parser("check", help="run check_env on envs", formatter_class=RichHelpFormatter)
    chk.add_argument("ids", nargs="*", help="env ids to check")
    chk.add_argument(
        "--env", action="append", default=[], dest="env_ids", help="an env id, as train takes it"
    )
    chk.add_argument(
        "--kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an env kwarg for every id checked, VALUE read as YAML (e.g. backend=docker)",
    )
    chk.add_argument("--all", action="store_true", help="check every registered env")
    chk.add_argument("--env-module", action="append", default=[], help="also load this file")
    chk.add_argument(
        "--config",
        help="a training recipe: check its env (with its env kwargs) and tokenise the env's "
        "oracle with its model's tokenizer against its token and turn budgets",
    )
    chk.set_defaults(func=cmd_check)


def _load(modules: list[str]) -> None:
    from agentrl.cli._common import load_env_modules

    load_env_modules(modules)


def cmd_list(args: argparse.Namespace) -> int:
    from agentrl.envs import all_specs
    from agentrl.envs.registration import plugin_errors

    _load(args.env_module)
    rows: list[dict[str, Any]] = [
        {"id": s.id, "family": s.family, "description": s.description, "rows": s.takes_rows()}
        for s in all_specs()
    ]
    for msg in plugin_errors.values():  # a broken plugin is skipped; say so once, on stderr
        Console(stderr=True).print(f"[yellow]skipped plugin:[/] {escape(msg)}", highlight=False)
    show_all = vars(args).get("all", False)  # a Namespace built by hand may lack it
    prefixes = _prefixes() if show_all else []
    if args.json:
        print(json.dumps({"envs": rows, "prefixes": prefixes} if show_all else rows, indent=2))
        return 0
    table = Table("id", "family", "rows", "description", title=f"{len(rows)} environments")
    for r in rows:
        table.add_row(r["id"], r["family"], "yes" if r["rows"] else "", r["description"])
    Console().print(table)
    if show_all:
        ptable = Table("prefix", "installed", "reaches here", "id after the prefix", "runs")
        for p in prefixes:
            have = "yes" if p["installed"] else f"no: {p['install']}"
            count = "open-ended" if p["count"] is None else str(p["count"])
            reach = ", ".join([count, *p["examples"][:3]]) if p["installed"] else ""
            cells = (f"{p['prefix']}:", have, reach, p["target"], p["process"])
            ptable.add_row(*map(escape, cells))
        Console().print(ptable)
    return 0


def _prefixes() -> list[dict[str, Any]]:
    """Each id prefix: installed or not (and the extra to install), what it reaches here."""
    from agentrl.envs.interop import PREFIXES, install_hint, missing_modules, reachable

    out = []
    for p in PREFIXES.values():
        try:
            count, examples = reachable(p)
        except Exception as e:  # noqa: BLE001 - a broken foreign registry is reported, not fatal
            count, examples = 0, [f"(listing failed: {type(e).__name__}: {e})"]
        out.append(
            {
                "prefix": p.name,
                "installed": not missing_modules(p),
                "install": install_hint(p),
                "count": count,
                "examples": examples,
                "target": p.target,
                "process": p.process,
            }
        )
    return out


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 when an env fails its check; with `--config`, budget warnings are printed
    (`agentrl.doctor.oracle`) but do not fail the check."""
    from agentrl.envs import EnvCheckError, all_specs, check_env, make

    _load(args.env_module)
    cfg = None
    config = vars(args).get("config")  # a Namespace built by hand may lack it
    if config:
        from agentrl.assembly.validate import load_train_config

        cfg = load_train_config(config, local_files=True)
    extra: dict[str, Any] = {}
    for item in vars(args).get("kwarg") or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"agentrl envs check: --kwarg {item!r}: expected KEY=VALUE")
            return 2
        extra[key] = yaml.safe_load(value)
    ids = [s.id for s in all_specs()] if args.all else [*args.ids, *vars(args).get("env_ids", [])]
    if not ids and cfg is not None:
        ids = [cfg.data.env]
    if not ids:
        print("agentrl envs check: give env ids, --all or --config RECIPE")
        return 2
    console, failed = Console(emoji=False), 0  # ids like `openenv:m:x` are not emoji codes
    for env_id in ids:
        kwargs = dict(cfg.data.env_kwargs) if cfg is not None and env_id == cfg.data.env else {}
        kwargs.update(extra)
        try:
            env = make(env_id, **kwargs)
            try:
                report = check_env(env)
            finally:
                env.close()
            oracle = "oracle ok" if report["oracle"] else "no oracle"
            tools = escape(str(report["tools"]))
            console.print(f"[green]PASS[/] {escape(env_id)} ({oracle}; tools: {tools})")
        except (EnvCheckError, Exception) as e:  # noqa: BLE001 - report every env
            failed += 1
            console.print(f"[red]FAIL[/] {escape(env_id)}: {type(e).__name__}: {escape(str(e))}")
            continue
        if cfg is not None and report["oracle"]:
            _budgets(console, env_id, kwargs, cfg)
    console.print(f"{len(ids) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _budgets(console: Console, env_id: str, kwargs: dict[str, Any], cfg: Any) -> None:
    """The env's oracle against the recipe's budgets, one line per finding."""
    import functools

    from agentrl.doctor.oracle import check_oracle_budgets
    from agentrl.envs import make
    from agentrl.models.load import load_tokenizer

    tok = load_tokenizer(cfg.model)
    for f in check_oracle_budgets(functools.partial(make, env_id, **kwargs), tok, cfg):
        style = "green" if f.level == "OK" else "yellow"
        fix = f"; fix: {f.fix}" if f.fix else ""
        line = f"[{style}]{f.level}[/] {escape(env_id)}: {escape(f.title)}{escape(fix)}"
        console.print(line, soft_wrap=True)
