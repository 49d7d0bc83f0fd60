#!/usr/bin/env bash
# Issue 44's GPU runs as a detached runner, so device calls can carry other parts meanwhile
# (the pattern of gpu_matrix_session.sh):
#   bash benchmarks/gpu_vllm_session.sh start AFTER [PART]   # carry the vLLM bundle's last part
#       (no PART and vLLM already installed by `vllm_gpu_install.sh install`: not installed again)
#   bash benchmarks/gpu_vllm_session.sh wait SECONDS
# installs vLLM from the parts stashed by earlier calls (vllm_gpu_install.sh stash) plus PART,
# copies this tree to /tmp/vrepo (the next call replaces the working tree), and starts, with
# setsid, a runner that waits for gpu_matrix_session's runner AFTER ('-': none) to end (so
# nothing else uses the GPU while it measures), then runs, each part with its own timeout:
#   gpu_vllm.py (vLLM offline, agentrl's vLLM adapter, the hf fast path compiled and eager)
#   gpu_grpo.py --engine vllm, then --engine fast (GRPO end to end, the multi-turn workload)
# VLLM_SESSION_SHORT=1: only vLLM, the adapter, the compiled hf engine and GRPO with vLLM;
# VLLM_SESSION_GRPO: the GRPO engines to run (default "vllm fast"; empty: none);
# VLLM_SESSION_PARTS: gpu_vllm.py's parts (default "vllm vllm-agentrl hf-compiled"; empty:
# gpu_vllm.py is skipped, e.g. for a GRPO-only call once the throughput is measured).
# VLLM_SITE: where vLLM's wheels go (default /tmp/site); another folder keeps its pins (openai
# 2.x, fastapi, llguidance) out of a /tmp/site that a running job (the Agents SDK run, which
# needs openai 3.x) imports from; the runner puts it before /tmp/site.
# Results in /tmp/o/vw, log /tmp/o/v.log, pid /tmp/o/v.pid; `wait SECONDS` brings them back.
# agentrl and its wheels must already be in /tmp/site (gpu_matrix_session.sh start, or
# gpu_env.sh).
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = wait ]; then  # wait SECONDS: until the runner ends or SECONDS pass; then
  # whatever it has written so far (partial results too) comes back in $OUT/v.tar.gz
  until=$((SECONDS + ${2:-0}))
  while kill -0 "$(cat /tmp/o/v.pid)" 2>/dev/null && [ "$SECONDS" -lt "$until" ]; do
    sleep 10; done
  kill -0 "$(cat /tmp/o/v.pid)" 2>/dev/null && echo "v: still running" || echo "v: ended"
  grep -E '^==|^\{|^\|' /tmp/o/v.log | cut -c1-400 | tail -40
  tar -C /tmp/o/vw -czf "${OUT:-/tmp/out}/v.tar.gz" . && cp /tmp/o/v.log "${OUT:-/tmp/out}/"
  exit 0
fi
[ "${1:-}" = start ] || { echo "usage: gpu_vllm_session.sh start AFTER [PART] | wait SECONDS" >&2; exit 1; }
after=${2:--}; shift 2 || :
if [ $# -eq 0 ] && [ -f "${VLLM_SITE:-/tmp/site}/.vllm-bundle-id" ]; then
  # Installed by an earlier call (vllm_gpu_install.sh install): reinstalling would replace
  # wheels under a runner that imports them (a matrix wave with an engine.kind=vllm cell).
  echo "vLLM bundle $(cat "${VLLM_SITE:-/tmp/site}/.vllm-bundle-id") already installed; not again"
else
  bash "$R/benchmarks/vllm_gpu_install.sh" install "$@" >/tmp/vllm-install.log 2>&1 \
    || { tail -20 /tmp/vllm-install.log; exit 1; }
  tail -3 /tmp/vllm-install.log
fi
rm -rf /tmp/vrepo /tmp/o/vw && mkdir -p /tmp/vrepo /tmp/o/vw
(cd "$R" && tar --exclude=./.gpuparts --exclude=./.gpuwheels --exclude=./.git -cf - .) \
  | tar -C /tmp/vrepo -xf -
rm -f /tmp/o/v.pid
cat >/tmp/vrepo/run.sh <<EOF
echo \$\$ >/tmp/o/v.pid  # its own pid, not \$! (gpu_matrix_session.sh)
while [ '$after' != - ] && kill -0 \$(cat /tmp/o/$after.pid 2>/dev/null || echo 0) 2>/dev/null; do
  sleep 2; done
cd /tmp/vrepo
export PYTHONPATH=${VLLM_SITE:-/tmp/site}:/tmp/site PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind
O=/tmp/o/vw
parts="${VLLM_SESSION_PARTS-vllm vllm-agentrl hf-compiled}"
if [ -n "\$parts" ]; then
  echo "== gpu_vllm \$(date -u +%T)"
  python3 benchmarks/gpu_vllm.py --out \$O --ckpt /tmp/vckpt --timeout-s 300 --parts \$parts
fi
for e in ${VLLM_SESSION_GRPO-vllm $([ "${VLLM_SESSION_SHORT:-0}" = 1 ] || echo fast)}; do
  echo "== grpo \$e \$(date -u +%T)"
  timeout 330 python3 benchmarks/gpu_grpo.py --part agentrl --engine \$e --micro 128 --packing \
    --steps 3 --sft-steps 60 --json \$O/grpo_\$e.json >\$O/grpo_\$e.log 2>&1
  echo "== grpo \$e rc=\$?"; tail -5 \$O/grpo_\$e.log
done
[ "${VLLM_SESSION_SHORT:-0}" = 1 ] && exit 0
echo "== hf eager \$(date -u +%T)"
python3 benchmarks/gpu_vllm.py --out \$O --ckpt /tmp/vckpt --timeout-s 200 --parts hf \\
  > \$O/hf_eager.log 2>&1
echo "== done \$(date -u +%T)"
EOF
# Redirected as a whole (a plain `cd && setsid ... &` subshell held our stdout: gpu_matrix_session.sh)
(cd /tmp && exec setsid nohup bash /tmp/vrepo/run.sh) >/tmp/o/v.log 2>&1 </dev/null &
for _ in $(seq 100); do [ -s /tmp/o/v.pid ] && break; sleep 0.1; done
echo "runner v started (pid $(cat /tmp/o/v.pid)) after '$after'; log /tmp/o/v.log"
