#!/bin/bash
# python -I: the working directory (the agent's files, a json.py say) is not on sys.path
python -I - <<'PY'
import json
want = {"name": "svc", "debug": False, "port": 8080, "workers": 4, "tags": ["a", "b"]}
try:
    ok = json.load(open("/app/config.json")) == want
except (OSError, ValueError):
    ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
PY
