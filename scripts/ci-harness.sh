#!/usr/bin/env bash
# CI's harness stage (run by .ci/run after the real-vLLM stage): build the harness venv
# (scripts/setup-harness.sh) and run tests/harness_stage in it: unchanged agent programs
# (Agents SDK, LangGraph, smolagents, mini-swe-agent, Claude Code, Codex CLI) against the
# gateway. Fails if any test fails or is skipped, or if none passed.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${HARNESS_VENV:-.venv-harness}
timeout 1200 bash scripts/setup-harness.sh "$venv" || { echo "CI harness: setup failed"; exit 1; }
log=$(mktemp)
PATH="$PWD/.npm-harness/node_modules/.bin:$PATH" timeout 1800 "$venv/bin/python" -m pytest \
  tests/harness_stage -p no:cacheprovider -rs 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E '^=+ .*(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$log" | tail -1)
echo "CI harness: $summary"
[ "$rc" = 0 ] || exit "$rc"
echo "$summary" | grep -Eq '[0-9]+ passed' || { echo "CI harness: no test passed"; exit 1; }
if echo "$summary" | grep -q skipped; then echo "CI harness: tests were skipped"; exit 1; fi
exit 0
