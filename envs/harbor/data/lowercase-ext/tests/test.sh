#!/bin/bash
cd /app/photos 2>/dev/null || { echo 0 > /logs/verifier/reward.txt; exit 0; }
got=$(ls | sort | tr '\n' ' ')
want="Beach.jpg IMG_001.jpg IMG_002.jpg notes.txt "
if [ "$got" = "$want" ] && [ "$(cat IMG_001.jpg)" = "a" ] && [ "$(cat Beach.jpg)" = "d" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
