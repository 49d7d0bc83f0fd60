#!/bin/bash
expected=$(cat /app/logs/*.log 2>/dev/null | grep -c ERROR)
got=$(tr -d '[:space:]' < /app/summary.txt 2>/dev/null)
# the logs themselves must be left as they were: 3 ERROR lines
if [ "$expected" = "3" ] && [ "$got" = "3" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
