#!/bin/bash
# python -I: the working directory (the agent's files, a json.py say) is not on sys.path
cd /app
python -I - <<'PY'
import json
want = ["region,total", "east,3", "north,15", "south,8"]
try:
    got = [line.strip() for line in open("/app/totals.csv") if line.strip()]
except OSError:
    got = []
rows = sum(1 for w in want[1:] if w in got)
reward = 1.0 if got == want else 0.0
json.dump({"reward": reward, "rows_right": rows}, open("/logs/verifier/reward.json", "w"))
PY
