#!/bin/bash
cd /app
python - <<'PY'
import sys
sys.path.insert(0, "/app")
from stats import mean, total
ok = mean([2, 4, 6]) == 4.0 and mean([5]) == 5.0 and abs(mean([1, 2]) - 1.5) < 1e-9
ok = ok and total([1, 2, 3]) == 6
sys.exit(0 if ok else 1)
PY
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
