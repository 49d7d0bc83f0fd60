#!/usr/bin/env bash
# Issue #40's learning run on the GPU: configs/smollm2-agents-sdk-gpu.yaml (SmolLM2-135M through
# the unchanged Agents SDK agent examples/harness/agents_sdk_calc.py on math/word-v0), over
# device calls as benchmarks/gpu_matrix_session.sh does (benchmarks/notes/learning.md, "Agents
# SDK on the GPU", has the call sequence):
#   here:  bash benchmarks/gpu_agents_sdk.sh fetch        # wheels -> .gpuparts/sdk (~17 MB)
#   GPU:   bash benchmarks/gpu_agents_sdk.sh stash        # carry: .gpuparts/sdk -> /tmp/sdkwhl
#   GPU:   bash benchmarks/gpu_agents_sdk.sh start [overrides...]   # carry: the last mxs part
#          unpack bundle mxs (SmolLM2's GGUF, agentrl's wheels) into /tmp/carry, install agentrl
#          and the missing wheels into /tmp/site (gpu_env.sh), the SDK wheels on top, then
#          start `python3 -m agentrl train --config ...` detached (setsid); returns at once
#   GPU:   bash benchmarks/gpu_agents_sdk.sh wait SECONDS # log tail every 30 s; then the run's
#          metrics/eval/config/curves and the log into $OUT/sdk
# The image has torch/transformers/triton only: the SDK (openai-agents, openai, pydantic, mcp,
# ...) and the gateway's own needs (fastapi, uvicorn, llguidance for tool_choice="required")
# come from WHEELS below, minus those the mxs bundle already carries.
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "gpu_agents_sdk: $*" >&2; exit 1; }
# The pins of scripts/harness-requirements.txt's resolution (.venv-harness), cp312 linux.
WHEELS=(
  openai-agents==0.24.0 openai==3.63.0 griffelib==2.4.1 httpx2==2.17.0 httpcore2==2.17.0
  truststore==0.10.5 mcp==2.3.0 mcp-types==2.3.0 pydantic==2.13.4 pydantic-core==2.46.4
  annotated-types==0.7.0 typing-inspection==0.4.2 typing-extensions==4.16.0
  opentelemetry-api==1.45.2 pyjwt==2.15.1 python-multipart==0.0.34 sse-starlette==3.7.1
  starlette==1.10.0 uvicorn==0.55.0 click==8.5.1 requests==2.34.2 charset-normalizer==3.4.7
  urllib3==2.8.0 websockets==16.1.1 jiter==0.19.0 cryptography==48.0.0 cffi==2.0.0
  pycparser==3.0 fastapi==0.165.0 annotated-doc==0.0.7 llguidance==1.9.1
)
RUN=/tmp/sdkrun

fetch() {
  local d="$R/.gpuparts/sdk"
  mkdir -p "$d"
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$d" "${WHEELS[@]}"
  ls -l "$d"
}

stash() {
  ls "$R"/.gpuparts/sdk/*.whl >/dev/null 2>&1 || die "no .gpuparts/sdk/*.whl carried"
  mkdir -p /tmp/sdkwhl && cp "$R"/.gpuparts/sdk/*.whl /tmp/sdkwhl/
  echo "stashed $(ls /tmp/sdkwhl | wc -l) wheels in /tmp/sdkwhl"
}

start() {
  [ -f /tmp/sdkwhl/openai_agents-0.24.0-py3-none-any.whl ] || die "stash the SDK wheels first"
  [ -d /tmp/carry/models ] || bash "$R/benchmarks/gpu_bundle.sh" unpack mxs /tmp/carry
  export AGENTRL_GGUF_DIR=/tmp/carry/models HF_HUB_OFFLINE=1
  # shellcheck source=benchmarks/gpu_env.sh
  GPU_ENV_KEEP_AGENTRL=1 GPU_WHEELS=/tmp/carry/whl source "$R/benchmarks/gpu_env.sh"
  [ -f /tmp/site/.sdk-installed ] || {
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
      /tmp/sdkwhl/*.whl 2>&1 | grep -v -i "warning" | tail -3 || :
    touch /tmp/site/.sdk-installed
  }
  # The run's own copies (the next call replaces this working tree); cwd /tmp/sdkrun puts
  # `examples` on the agent children's path, /tmp/site's agentrl comes first.
  rm -rf "$RUN" && mkdir -p "$RUN" && cp -r "$R/examples" "$R/configs/smollm2-agents-sdk-gpu.yaml" "$RUN/"
  (cd "$RUN" && python3 -c "import examples.harness.agents_sdk_calc, agentrl.serve.app, llguidance")
  local cmd; cmd=$(printf '%q ' python3 -m agentrl train --config smollm2-agents-sdk-gpu.yaml \
    trainer.out_dir="$RUN/out" "$@")
  # Redirected as a whole: a plain `cd && setsid ... &` subshell holds the call's stdout
  # until the run ends (gpu_matrix_session.sh).
  rm -f "$RUN/pid"
  (cd "$RUN" && exec setsid nohup bash -c "echo \$\$ >$RUN/pid; exec $cmd") >"$RUN/train.log" 2>&1 </dev/null &
  for _ in $(seq 100); do [ -s "$RUN/pid" ] && break; sleep 0.1; done
  echo "started (pid $(cat "$RUN/pid")); log $RUN/train.log"
}

wait_for() {
  local until=$((SECONDS + $1))
  [ -f "$RUN/pid" ] || die "no run started on this machine"
  while :; do
    date -u +%T
    ! command -v nvidia-smi >/dev/null || nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    grep -E '^step |^eval \(.*\) step|^held-out|Error|error' "$RUN/train.log" | cut -c1-220 | tail -6 || :
    kill -0 "$(cat "$RUN/pid")" 2>/dev/null && [ "$SECONDS" -lt "$until" ] || break
    sleep 30
  done
  mkdir -p "${OUT:-/tmp/out}/sdk"
  for f in metrics.jsonl eval.jsonl config.yaml; do cp "$RUN/out/$f" "${OUT:-/tmp/out}/sdk/" 2>/dev/null || :; done
  # at most 8 files come back from a call: 3 + these 3 curves + the log
  for f in reward success time; do cp "$RUN/out/plots/$f.png" "${OUT:-/tmp/out}/sdk/" 2>/dev/null || :; done
  tail -c 20000 "$RUN/train.log" >"${OUT:-/tmp/out}/sdk/train.log"
  kill -0 "$(cat "$RUN/pid")" 2>/dev/null && echo "still running" || echo "ended; results in \$OUT/sdk"
}

cmd=${1:-}; shift || :
case $cmd in
  fetch) fetch ;;
  stash) stash ;;
  start) start "$@" ;;
  wait) [ $# -ge 1 ] || die "usage: wait SECONDS"; wait_for "$1" ;;
  *) die "usage: gpu_agents_sdk.sh fetch | stash | start [overrides...] | wait SECONDS" ;;
esac
