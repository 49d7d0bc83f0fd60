#!/bin/bash
cd /app
python - <<'PY'
import csv
from collections import defaultdict
sums = defaultdict(int)
for row in csv.DictReader(open("sales.csv")):
    sums[row["region"]] += int(row["amount"])
with open("totals.csv", "w") as f:
    f.write("region,total\n")
    for region in sorted(sums):
        f.write(f"{region},{sums[region]}\n")
PY
