"""`agentrl config show CONFIG [key=value ...] [--env ID] [--env-module FILE]`: print the
resolved, validated config (`--env-module` as for `agentrl train`, so a user env id resolves;
without CONFIG, the config `agentrl train` runs without one, said in a first comment line).

`agentrl config import-verl VERL.yaml [--out agentrl.yaml] [--env ID]`: translate a verl
PPO/GRPO YAML into an agentrl config, validate it, and list every verl key it could not map.
"""

from __future__ import annotations

import argparse

from rich_argparse import RichHelpFormatter


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="inspect configs", formatter_class=RichHelpFormatter)
    s = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = s.add_parser("show", help="print the resolved config", formatter_class=RichHelpFormatter)
    show.add_argument(
        "config", nargs="?", help="YAML file (default: what `agentrl train` runs without one)"
    )
    show.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    show.add_argument("--env", help="env id (same as data.env=ID)")
    show.add_argument("--env-module", action="append", default=[], help="load a user env file")
    show.set_defaults(func=cmd_show)
    imp = s.add_parser(
        "import-verl",
        help="translate a verl PPO/GRPO YAML into an agentrl config",
        formatter_class=RichHelpFormatter,
        description="Map verl keys (algorithm, data, actor_rollout_ref, trainer) onto agentrl's "
        "config; every key that cannot be mapped is printed by dotted path.",
    )
    imp.add_argument("verl_config", help="verl YAML (a Hydra ppo_trainer-style file)")
    imp.add_argument("--out", help="write the agentrl YAML here (default: stdout)")
    imp.add_argument("--env", help="agentrl env id for data.env (verl has no env concept)")
    imp.add_argument(
        "--no-defaults",
        action="store_true",
        help="translate the file's own keys only, without composing its Hydra defaults: list "
        "(verl's defaults for everything else are then not applied)",
    )
    imp.set_defaults(func=cmd_import_verl)


def cmd_show(args: argparse.Namespace) -> int:
    from agentrl.assembly.validate import load_train_config
    from agentrl.cli._common import load_env_modules
    from agentrl.config import dump_yaml

    load_env_modules(args.env_module)
    path, overrides = args.config, list(args.overrides)
    if path and "=" in path:
        path, overrides = None, [path, *overrides]
    if args.env:
        overrides.append(f"data.env={args.env}")
    header = ""
    if path is None:  # what `agentrl train` runs without a file, not the schema's defaults
        from agentrl.cli.train import default_config_path

        path = default_config_path()
        header = f"# no config file: agentrl train's default, {path}\n"
    cfg = load_train_config(path, overrides, local_files=True)
    print(header + dump_yaml(cfg, changed_tuning_only=True), end="")
    return 0


def read_verl(path: str, no_defaults: bool = False) -> tuple[dict, bool]:
    """The verl YAML at `path` with its Hydra `defaults:` composed from the files beside it
    (`agentrl.compat.verl.hydra`; refused when they cannot be), and whether it had any.
    Anything that is not a YAML mapping (a shell script given by mistake) is one line."""
    from agentrl.compat.verl.hydra import compose
    from agentrl.config import ConfigError
    from agentrl.config.loader import read_yaml

    what = "a verl config is a YAML file of sections: data, actor_rollout_ref, algorithm, ..."
    try:
        tree = read_yaml(path)
    except ConfigError as e:
        if "invalid YAML" not in str(e):
            raise
        raise ConfigError(f"{path}: not a YAML mapping ({what}): {e}") from None
    if not isinstance(tree, dict):
        got = type(tree).__name__
        raise ConfigError(f"{path}: not a YAML mapping ({what}); it parses as a {got}")
    if no_defaults:
        return {k: v for k, v in tree.items() if k != "defaults"}, False
    return compose(tree, path), "defaults" in tree


def cmd_import_verl(args: argparse.Namespace) -> int:
    """Translate, validate through `load_train_config`, and report; exit 2 (and nothing
    written) if the result is invalid."""
    import sys
    import tempfile
    from pathlib import Path

    from agentrl.assembly.validate import load_train_config
    from agentrl.compat.verl import import_verl, to_yaml
    from agentrl.config import ConfigError

    tree, composed = read_verl(args.verl_config, args.no_defaults)
    result = import_verl(tree, env=args.env)
    if args.no_defaults:
        result.notes.append("--no-defaults: the file's Hydra defaults: list was not composed")
    if composed:
        result.notes.append(
            f"defaults: composed from the YAML files beside {args.verl_config} (Hydra's list)"
        )
    text = to_yaml(result, args.verl_config)
    with tempfile.TemporaryDirectory() as tmp:
        check = Path(tmp) / "agentrl.yaml"
        check.write_text(text, encoding="utf-8")
        try:
            load_train_config(check)
        except ConfigError as e:
            problem = str(e).removeprefix(f"{check}: ")
            print(
                f"config error in the translated config (nothing written): {problem}",
                file=sys.stderr,
            )
            return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    err = sys.stderr
    print(f"unmapped verl keys ({len(result.unmapped)}):", file=err)
    for key, why in sorted(result.unmapped.items()):
        print(f"  {key}: {why}", file=err)
    if result.inactive:
        print(f"ignored, feature off in verl ({len(result.inactive)}):", file=err)
        for key, why in sorted(result.inactive.items()):
            print(f"  {key}: {why}", file=err)
    for warning in result.warnings:
        print(f"warning: {warning}", file=err)
    for note in result.notes:
        print(f"note: {note}", file=err)
    if args.out:
        print(f"wrote {args.out} (validated)", file=err)
    return 0
