#!/bin/bash
# The agent's module runs in a child process that only prints values; this script decides and
# writes the reward last, on every path (a reward file the module wrote is overwritten).
out=$(cd /app && timeout 20 python -c '
import json, stats
print(json.dumps([stats.mean([2, 4, 6]), stats.mean([5]), stats.mean([1, 2]), stats.total([1, 2, 3])]))
' 2>/dev/null | tail -n 1)
if [ "$out" = "[4.0, 5.0, 1.5, 6]" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
