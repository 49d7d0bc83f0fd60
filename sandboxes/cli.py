"""``agentrl sandbox run``: run a file (or stdin) in a sandbox from the shell.

    agentrl sandbox run [--backend local|docker] [--lang python|bash] [--timeout 5]
                        [--memory 256M] [--max-output 1M] [--stdin FILE] [--json] FILE|-

Prints the program's stdout/stderr and exits with its exit code; with ``--json`` prints the
:class:`ExecResult` as JSON (exit code 0 unless the sandbox itself failed). When the program
did not exit on its own the exit code tells why: timeout 124, memory 125, output_limit 126,
killed 137, sandbox_error 70.

Wiring: ``add_parser(subparsers)`` registers ``sandbox`` with its ``run`` subcommand and
sets ``func`` to a handler taking the parsed namespace and returning the exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .base import ExecRequest, get_backend

EXIT_CODES = {
    "timeout": 124,
    "memory": 125,
    "output_limit": 126,
    "killed": 137,
    "sandbox_error": 70,
}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``256M`` / ``1G`` / ``65536`` -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    return int(float(t[: len(t) - len(unit)]) * _UNITS[unit])


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sandbox run`` on the ``agentrl`` CLI's subparsers."""
    sandbox = sub.add_parser("sandbox", help="run untrusted code in a sandbox")
    inner = sandbox.add_subparsers(dest="sandbox_cmd", required=True)
    p = inner.add_parser("run", help="run FILE (or - for stdin) in a sandbox")
    p.add_argument("file", help="program file, or - to read it from stdin")
    p.add_argument("--backend", default="local", choices=["local", "docker"])
    p.add_argument("--lang", default="python", choices=["python", "bash"])
    p.add_argument("--timeout", type=float, default=5.0, help="wall-clock seconds")
    p.add_argument("--memory", default="256M", help="memory limit, e.g. 256M or 1G")
    p.add_argument("--max-output", default="1M", help="cap per stream, e.g. 64K")
    p.add_argument("--stdin", default=None, help="file fed to the program's stdin")
    p.add_argument("--json", action="store_true", help="print the ExecResult as JSON")
    p.set_defaults(func=sandbox_run)


def sandbox_run(args: argparse.Namespace) -> int:
    """Handler for ``agentrl sandbox run``; returns the process exit code."""
    code = sys.stdin.read() if args.file == "-" else open(args.file).read()
    stdin = ""
    if args.stdin:
        with open(args.stdin) as f:
            stdin = f.read()
    req = ExecRequest(
        code,
        language=args.lang,
        stdin=stdin,
        timeout_s=args.timeout,
        memory_mb=max(1, parse_size(args.memory) >> 20),
        max_output_bytes=parse_size(args.max_output),
    )
    try:
        res = get_backend(args.backend).run(req)
    except Exception as exc:  # noqa: BLE001 - backend unavailable: report, don't trace
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_CODES["sandbox_error"]
    if args.json:
        print(json.dumps(res.to_dict()))
        return EXIT_CODES["sandbox_error"] if res.status == "sandbox_error" else 0
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.status in EXIT_CODES:
        print(f"sandbox: {res.status}", file=sys.stderr)
        return EXIT_CODES[res.status]
    return res.exit_code or 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry: ``python -m agentrl.sandboxes.cli sandbox run FILE``."""
    parser = argparse.ArgumentParser(prog="agentrl")
    add_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
