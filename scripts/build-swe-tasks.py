#!/usr/bin/env python3
"""Build SWE tasks (injected bugs that break a package's own tests) reproducibly from a seed.

    python scripts/build-swe-tasks.py --out tasks.jsonl --per-package 8 --seed 0
    python scripts/build-swe-tasks.py --packages minilib inflection --per-package 4

Runs each package's test suite on the host once per candidate mutation (the packages and the
mutations are trusted code; agents' code only ever runs in a sandbox). Train on the result with
`agentrl train --env swe/pyrepo-v0 data.env_kwargs.tasks=tasks.jsonl`.
"""

import argparse
import sys
import time

from agentrl.envs.swe.tasks import PACKAGES, build


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--packages", nargs="+", default=sorted(PACKAGES), choices=sorted(PACKAGES))
    ap.add_argument("--per-package", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tries", type=int, default=60, help="candidate mutants per package")
    ap.add_argument("--out", default="-", help="JSONL file, or - for stdout")
    args = ap.parse_args()
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    for name in args.packages:
        t0 = time.monotonic()
        tasks = build(name, args.per_package, args.seed, max_tries=args.max_tries)
        for t in tasks:
            out.write(t.to_json() + "\n")
        out.flush()
        print(f"{name}: {len(tasks)} tasks in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
