#!/bin/bash
# The agent's module runs in a child process that only prints values, on inputs drawn here (so
# no fixed line it could print, at exit say, is the answer); the expected values are computed
# after it ended, by a `python -I` that cannot import the agent's files; this script decides and
# writes the reward last, on every path (a reward file the module wrote is overwritten).
cases=$(python -I -c '
import json, random
r = random.SystemRandom()
print(json.dumps([[r.randint(-999, 999) for _ in range(r.randint(1, 7))] for _ in range(6)]))
')
out=$(cd /app && CASES="$cases" timeout 20 python -c '
import json, os, stats
cases = json.loads(os.environ["CASES"])
print(json.dumps([[stats.mean(xs) for xs in cases], [stats.total(xs) for xs in cases]]))
' 2>/dev/null | tail -n 1)
ok=$(CASES="$cases" OUT="$out" python -I -c '
import json, math, os
cases = json.loads(os.environ["CASES"])
try:
    means, totals = json.loads(os.environ["OUT"])
    right = len(means) == len(totals) == len(cases) and all(
        isinstance(m, float) and math.isclose(m, sum(xs) / len(xs), rel_tol=1e-9, abs_tol=1e-12)
        and type(t) is int and t == sum(xs)
        for xs, m, t in zip(cases, means, totals)
    )
except (ValueError, TypeError):
    right = False
print(1 if right else 0)
' 2>/dev/null)
if [ "$ok" = "1" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
