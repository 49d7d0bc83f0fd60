#!/usr/bin/env bash
# The learning matrix (issue #42) over back-to-back device calls, the GPU busy while the next
# bundle parts are carried: a call either stashes one part, or also unpacks a bundle and
# starts a detached runner (setsid: it outlives the call; the machine keeps it, and /tmp,
# while calls follow within ~30 s), or waits on the runners and brings their results back.
#   bash benchmarks/gpu_matrix_session.sh stash NAME           # carry: .gpuparts/NAME/<a part>
#   bash benchmarks/gpu_matrix_session.sh start NAME TAG AFTER [gpu_matrix.py args...]
#       unpack bundle NAME (carrying its last part) into /tmp/carry; install agentrl (once:
#       a later start keeps it) and the bundle's wheels (whl/) that do not import yet into
#       /tmp/site, bubblewrap into /tmp/bw; then, detached: the
#       cells' models converted at once (--prepare-only, CPU), then wait for runner AFTER
#       ('-': none) to end, then gpu_matrix.py ARGS with --out /tmp/o/TAG. Returns at once.
#   bash benchmarks/gpu_matrix_session.sh wait SECONDS TAG...  # until those runners end (or
#       SECONDS): their log tails and GPU memory every 30 s, then /tmp/o/TAG copied to $OUT
# Bundles (benchmarks/gpu_bundle.sh pack): models/<GGUF files, tokenizer sidecars>, whl/<wheels
# agentrl needs that the image lacks, setuptools and wheel to build it, bubblewrap .deb>.
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "gpu_matrix_session: $*" >&2; exit 1; }

start() {  # start NAME TAG AFTER [ARGS...]
  local name=$1 tag=$2 after=$3; shift 3
  bash "$R/benchmarks/gpu_bundle.sh" unpack "$name" /tmp/carry
  # Only one bundle carries whl/ (wheels, bubblewrap): start it first on this machine. Session
  # 26 started the models-only Gemma bundle alone: a bare dpkg error, then every cell failed
  # on `gguf` and `bm25s`.
  ls /tmp/carry/whl/bubblewrap_*.deb >/dev/null 2>&1 || die "bundle $name has no whl/ (the" \
    "wheels, bubblewrap) and no earlier start left one in /tmp/carry: start the bundle that" \
    "carries it (mxs) first on this machine"
  [ -d /tmp/bw/usr/bin ] || dpkg-deb -x /tmp/carry/whl/bubblewrap_*.deb /tmp/bw
  python3 - <<'PY'  # xz-packed files (a tokenizer.json) unpacked beside themselves
import lzma, pathlib
for f in pathlib.Path("/tmp/carry/models").rglob("*.xz"):
    f.with_suffix("").write_bytes(lzma.decompress(f.read_bytes()))
    f.unlink()
PY
  export PATH=/tmp/bw/usr/bin:$PATH AGENTRL_GGUF_DIR=/tmp/carry/models HF_HUB_OFFLINE=1
  # shellcheck source=benchmarks/gpu_env.sh
  # A second runner keeps the agentrl the first installed (its cells import from it).
  GPU_ENV_KEEP_AGENTRL=1 GPU_WHEELS=/tmp/carry/whl source "$R/benchmarks/gpu_env.sh"
  # The runner's own copies: the next call replaces this working tree.
  local run=/tmp/mxrun/$tag
  rm -rf "$run" && mkdir -p "$run" /tmp/o
  cp -r "$R/configs/matrix" "$run/cfg" && cp "$R/benchmarks/gpu_matrix.py" "$run/"
  local common=(--config-dir "$run/cfg" --cache-dir /tmp/cache --run-root /tmp/mx)
  local prep; prep=$(printf '%q ' python3 "$run/gpu_matrix.py" "${common[@]}" --prepare-only "$@")
  local main; main=$(printf '%q ' python3 "$run/gpu_matrix.py" "${common[@]}" --out "/tmp/o/$tag" "$@")
  # The runner writes its own pid (exec keeps it), and the whole background job is
  # redirected: `cd /tmp && setsid ... &` ran in a subshell that held this call's stdout and
  # waited for the runner, so a caller reading our output (`| tail`) hung until the wave
  # ended, and `$!` was that subshell's pid (on the H100, 2026-12-07: a 200 s call, then a
  # running wave reported ended once the call's timeout had killed the subshell).
  rm -f "/tmp/o/$tag.pid"
  (cd /tmp && exec setsid nohup bash -c "
    echo \$\$ >/tmp/o/$tag.pid
    $prep || exit 1
    while [ '$after' != - ] && kill -0 \$(cat /tmp/o/$after.pid 2>/dev/null || echo 0) 2>/dev/null; do sleep 2; done
    exec $main") >"/tmp/o/$tag.log" 2>&1 </dev/null &
  for _ in $(seq 100); do [ -s "/tmp/o/$tag.pid" ] && break; sleep 0.1; done
  echo "runner $tag started (pid $(cat "/tmp/o/$tag.pid")); log /tmp/o/$tag.log"
}

wait_for() {  # wait SECONDS TAG...
  local until=$((SECONDS + $1)) tag alive; shift
  while :; do
    alive=0
    for tag in "$@"; do
      [ -f "/tmp/o/$tag.pid" ] || die "no runner $tag on this machine (was it replaced?)"
      kill -0 "$(cat "/tmp/o/$tag.pid")" 2>/dev/null && alive=$((alive + 1))
    done
    date -u +%T
    ! command -v nvidia-smi >/dev/null || nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    for tag in "$@"; do
      echo "--- $tag"
      grep -E '^\[|^started|runs again|ready|skipped|Error|error:' "/tmp/o/$tag.log" | cut -c1-200 | tail -8 || :
    done
    [ "$alive" -gt 0 ] && [ "$SECONDS" -lt "$until" ] || break
    sleep 30
  done
  for tag in "$@"; do
    if kill -0 "$(cat "/tmp/o/$tag.pid")" 2>/dev/null; then echo "$tag: still running"; continue; fi
    mkdir -p "${OUT:-/tmp/out}/$tag"
    cp -r "/tmp/o/$tag/." "${OUT:-/tmp/out}/$tag/" 2>/dev/null || :
    tail -c 20000 "/tmp/o/$tag.log" >"${OUT:-/tmp/out}/$tag/runner.log"
    echo "$tag: ended; results in \$OUT/$tag"
  done
}

cmd=${1:-}; shift || :
case $cmd in
  stash) bash "$R/benchmarks/gpu_bundle.sh" stash "$@" ;;
  start) [ $# -ge 3 ] || die "usage: start NAME TAG AFTER [gpu_matrix.py args...]"; start "$@" ;;
  wait) [ $# -ge 2 ] || die "usage: wait SECONDS TAG..."; wait_for "$@" ;;
  *) die "usage: stash NAME | start NAME TAG AFTER [args...] | wait SECONDS TAG..." ;;
esac
