"""`agentrl doctor`: preflight checks for a config; exit 1 if anything FAILs.

agentrl doctor                                   # default config, tiny model
agentrl doctor --config configs/x.yaml --model /ckpt/Qwen3-8B rollout.max_total_tokens=8192
agentrl doctor --env-module my_env.py --env demo/reverse-v0
agentrl doctor --env code/humaneval-v0 --red-team     # do adversarial probes get paid?
agentrl doctor --env code/humaneval-v0 --red-team --backend docker
"""

from __future__ import annotations

import argparse
import json

from rich_argparse import RichHelpFormatter

_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="preflight checks: stack, sandbox, template, tools, budgets, dry run",
        description="Check that a config can run: versions, GPU, sandbox isolation, chat "
        "template, that the env's tools reach the prompt and parse back, token budgets, and "
        "a 2-episode oracle dry run on CPU. Exit code 1 if any check FAILs.",
        formatter_class=RichHelpFormatter,
    )
    p.add_argument("--config", "-c", help="YAML config (defaults when omitted)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.add_argument("--model", help="model dir or tiny:<preset> (overrides model.path)")
    p.add_argument("--env", help="env id (same as data.env=ID)")
    p.add_argument("--env-module", action="append", default=[], help="also load this env file")
    p.add_argument(
        "--episodes",
        type=int,
        default=2,
        help="oracle dry-run episodes (0 = skip); with --red-team, episodes per probe",
    )
    p.add_argument(
        "--red-team",
        action="store_true",
        help="only play the adversarial probes against the env's reward (needs --env or "
        "data.env); a probe that gets paid is a FAIL",
    )
    p.add_argument("--probe", action="append", default=[], help="with --red-team: only this probe")
    p.add_argument(
        "--backend",
        help="with --red-team: the sandbox backend the env grades and runs tools on "
        "(its backend= option, e.g. docker)",
    )
    p.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="with --red-team: a probe pays above this fraction of the reward range",
    )
    p.add_argument("--no-sandbox", action="store_true", help="skip the sandbox run")
    p.add_argument("--json", action="store_true", help="print findings as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="show only WARN and FAIL")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrl.assembly.validate import load_train_config
    from agentrl.cli._common import load_env_modules
    from agentrl.config import ConfigError
    from agentrl.doctor import exit_code, run_doctor

    console = Console()
    try:
        load_env_modules(args.env_module)
        env = [f"data.env={args.env}"] if args.env else []
        cfg = load_train_config(args.config, [*args.overrides, *env])
    except (ConfigError, OSError) as e:
        console.print(f"[red]config error:[/] {e}", soft_wrap=True)
        return 2
    if args.red_team:
        from agentrl.doctor import run_red_team

        try:
            findings = run_red_team(
                cfg.data.env,
                dict(cfg.data.env_kwargs),
                episodes=args.episodes,
                probes=args.probe or None,
                threshold=args.threshold,
                backend=args.backend,
            )
        except ValueError as e:
            console.print(f"[red]red team:[/] {e}")
            return 2
    else:
        findings = run_doctor(
            cfg, args.model, dry_run_episodes=args.episodes, sandbox=not args.no_sandbox
        )
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
        return exit_code(findings)
    table = Table("", "section", "check", "detail / fix", title="agentrl doctor", expand=True)
    shown = [f for f in findings if not (args.quiet and f.level == "OK")]
    for f in shown:
        text = f.detail + (f"\n[bold]fix:[/] {f.fix}" if f.fix and f.level != "OK" else "")
        table.add_row(f"[{_STYLE[f.level]}]{f.level}[/]", f.section, f.title, text)
    if shown:
        console.print(table)
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in _STYLE}
    console.print(
        f"[green]{counts['OK']} ok[/], [yellow]{counts['WARN']} warn[/], "
        f"[red]{counts['FAIL']} fail[/]"
    )
    return exit_code(findings)
