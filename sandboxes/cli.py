"""``agentrl sandbox run``: run a file (or stdin) in a sandbox from the shell.

    agentrl sandbox run [--backend local|docker] [--lang python|bash] [--timeout 5]
                        [--memory 256M] [--max-output 1M] [--stdin FILE] [--json] FILE|-

Prints the program's stdout/stderr and exits with its exit code; with ``--json`` prints the
:class:`ExecResult` as JSON (exit code 0 unless the sandbox itself failed). When the program
did not exit on its own the exit code tells why: timeout 124, memory 125, output_limit 126,
disk 127, killed 137, sandbox_error 70. A usage error (bad value, unreadable file) prints one
line naming the culprit on stderr (``{"error": ...}`` on stdout with ``--json``) and exits 2,
so it is never mistaken for the program's own failure.

Wiring: ``add_parser(subparsers)`` registers ``sandbox`` with its ``run`` subcommand and
sets ``func`` to a handler taking the parsed namespace and returning the exit code.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence

from .base import ExecRequest, get_backend

EXIT_CODES = {
    "timeout": 124,
    "memory": 125,
    "output_limit": 126,
    "disk": 127,
    "killed": 137,
    "sandbox_error": 70,
}
USAGE = 2
MIN_MEMORY = 16 << 20  # below this no interpreter starts (docker refuses < 6M outright)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]?)(?:I?B)?", re.I)


class UsageError(ValueError):
    """A bad command-line value; the message names it."""


def parse_size(text: str, flag: str = "size") -> int:
    """``256M`` / ``1G`` / ``64KiB`` / ``65536`` -> bytes; anything else is a UsageError."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"{flag} {text!r}: not a size (use e.g. 256M, 1G, 64K)")
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if size <= 0:
        raise UsageError(f"{flag} {text!r}: must be > 0")
    return size


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"--timeout {text!r}: must be a finite number of seconds > 0")
    return value


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from None


def build_request(args: argparse.Namespace) -> ExecRequest:
    """The request the CLI arguments describe; every bad value raises a UsageError."""
    timeout = _timeout(args.timeout)
    memory = parse_size(args.memory, "--memory")
    if memory < MIN_MEMORY:
        raise UsageError(f"--memory {args.memory!r}: must be at least {MIN_MEMORY >> 20}M")
    max_output = parse_size(args.max_output, "--max-output")
    if args.file == "-":
        code = sys.stdin.read()
    else:
        code = _read(args.file, "program file")
    stdin = _read(args.stdin, "--stdin file") if args.stdin else ""
    return ExecRequest(
        code,
        language=args.lang,
        stdin=stdin,
        timeout_s=timeout,
        memory_mb=-(-memory // (1 << 20)),  # whole MiB, rounded up
        max_output_bytes=max_output,
    )


def backend_for(name: str, memory_mb: int):
    """The backend for one CLI run; docker's warm container is made for this run's memory."""
    if name == "docker":
        return get_backend(
            "docker", pool_size=1, pool_memory_mb=memory_mb, pool_wait_s=30.0, pool_launches=1
        )
    return get_backend(name)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sandbox run`` on the ``agentrl`` CLI's subparsers."""
    sandbox = sub.add_parser("sandbox", help="run untrusted code in a sandbox")
    inner = sandbox.add_subparsers(dest="sandbox_cmd", required=True)
    p = inner.add_parser("run", help="run FILE (or - for stdin) in a sandbox")
    p.add_argument("file", help="program file, or - to read it from stdin")
    p.add_argument("--backend", default="local", choices=["local", "docker"])
    p.add_argument("--lang", default="python", choices=["python", "bash"])
    p.add_argument("--timeout", default="5", help="wall-clock seconds")
    p.add_argument("--memory", default="256M", help="memory limit, e.g. 256M or 1G")
    p.add_argument("--max-output", default="1M", help="cap per stream, e.g. 64K")
    p.add_argument("--stdin", default=None, help="file fed to the program's stdin")
    p.add_argument("--json", action="store_true", help="print the ExecResult as JSON")
    p.set_defaults(func=sandbox_run)
    p.error = _one_line_error  # type: ignore[method-assign]  # argparse's own errors too


def _one_line_error(message: str) -> None:
    """argparse errors (bad choice, missing value) as one line, JSON with --json, exit 2."""
    if "--json" in sys.argv:
        print(json.dumps({"error": message}))
    print(f"agentrl sandbox run: {message}", file=sys.stderr)
    raise SystemExit(USAGE)


def _usage(args: argparse.Namespace, msg: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"error": msg}))
    print(f"agentrl sandbox run: {msg}", file=sys.stderr)
    return USAGE


def sandbox_run(args: argparse.Namespace) -> int:
    """Handler for ``agentrl sandbox run``; returns the process exit code."""
    try:
        req = build_request(args)
    except (UsageError, ValueError) as exc:
        return _usage(args, str(exc))
    try:
        res = backend_for(args.backend, req.memory_mb).run(req)
    except Exception as exc:  # noqa: BLE001 - backend unavailable: report, don't trace
        msg = f"sandbox: {args.backend} backend unavailable: {exc}".replace("\n", " ")
        if args.json:
            print(json.dumps({"error": msg}))
        print(msg, file=sys.stderr)
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
