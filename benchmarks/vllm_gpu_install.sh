#!/usr/bin/env bash
# Install real vLLM 0.26.0 on the device tool's GPU machine from the parts that
# benchmarks/vllm_gpu_bundle.sh made (.gpuparts/vllm/vllm-0.26.0-<id>.part<i>of<n>). A call
# carries one part (64 MiB a call), and the machine keeps /tmp only ~30 s between calls, so:
#   call 1..n-1: bash benchmarks/vllm_gpu_install.sh stash [PART...]     # copy to /tmp/vllm-parts
#   call n:      bash benchmarks/vllm_gpu_install.sh install [--check] [PART...] && <your run>
#   any call:    bash benchmarks/vllm_gpu_install.sh check | env
# No PART: every part carried in .gpuparts/vllm/. `install` stashes its PARTs first, joins the
# parts, checks the whole bundle's sha256 (its id is in the part names) and SHA256SUMS inside,
# installs the small wheels with `pip install --no-index --no-deps --target`, untars the trimmed
# vLLM tree there and prints the environment to run vLLM with (`env` prints it as exports).
# Env: VLLM_SITE (default /tmp/site), VLLM_PARTS (default /tmp/vllm-parts), PYTHON (python3).
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
SITE=${VLLM_SITE:-/tmp/site}
PARTS=${VLLM_PARTS:-/tmp/vllm-parts}
PY=${PYTHON:-python3}
ENVS="PYTHONPATH=$SITE:. VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1"
PART_RE='^vllm-[0-9.]+-([0-9a-f]{12})\.part([0-9])of([0-9])$'
die() { echo "vllm_gpu_install: $*" >&2; exit 1; }

stash() {  # stash [PART...]: copy parts (default: those carried in .gpuparts/vllm/) to $PARTS
  local files=("$@") f id
  [ ${#files[@]} -gt 0 ] || mapfile -t files < <(ls "$R"/.gpuparts/vllm/vllm-*.part* 2>/dev/null)
  [ ${#files[@]} -gt 0 ] || [ "${QUIET_NONE:-0}" = 1 ] ||
    die "no part carried in .gpuparts/vllm/ (name it in run's carry argument)"
  mkdir -p "$PARTS"
  for f in "${files[@]}"; do
    [ -f "$f" ] || die "no part $f here: carry it in this call (run's carry argument)"
    [[ $(basename "$f") =~ $PART_RE ]] || die "$f is not named like a part (vllm-VER-ID.partIofN)"
    id=${BASH_REMATCH[1]}
    for old in "$PARTS"/vllm-*.part*; do  # another build's parts can only fail the sums
      [ -e "$old" ] && [[ $old != *-"$id".part* ]] && rm "$old" && echo "removed $(basename "$old") (another build)"
    done
    cp "$f" "$PARTS/"
    echo "stashed $(basename "$f") ($(stat -c %s "$f") bytes) in $PARTS"
  done
}

bundle_id() {  # the id of the parts in $PARTS (of the newest stashed part if several builds)
  local newest
  newest=$(ls -t "$PARTS"/vllm-*.part* 2>/dev/null | head -1) ||:
  [ -n "$newest" ] || die "no parts in $PARTS: this machine has none of them (it keeps files ~30 s" \
    "between calls, or was replaced). Stash every part again, one call each, install with the last"
  [[ $(basename "$newest") =~ $PART_RE ]] && echo "${BASH_REMATCH[1]}"
}

install() {  # install [--check] [PART...]
  local check=0
  if [ "${1:-}" = --check ]; then check=1; shift; fi
  QUIET_NONE=1 stash "$@"
  local id; id=$(bundle_id)
  local n i f
  n=$(ls "$PARTS"/vllm-*-"$id".part* | head -1 | sed -E 's/.*of([0-9])$/\1/')
  local missing=() files=()
  for i in $(seq 1 "$n"); do
    f=$(ls "$PARTS"/vllm-*-"$id".part"${i}"of"$n" 2>/dev/null) || { missing+=("$i"); continue; }
    files+=("$f")
  done
  [ ${#missing[@]} -eq 0 ] || die "bundle $id: part(s) ${missing[*]} of $n missing from $PARTS" \
    "(the machine keeps files ~30 s between calls, or was replaced): stash them again, each" \
    "call right after the last, and install in the call that carries the last part"
  local work=/tmp/vllm-bundle-$id
  rm -rf "$work" && mkdir -p "$work"
  cat "${files[@]}" >"$work/bundle.tar"
  sha256sum "$work/bundle.tar" | cut -c1-12 | grep -qx "$id" || { rm -rf "$work"; die "bundle" \
    "$id: the joined parts do not hash to their id (a damaged part): rm -r $PARTS, then" \
    "stash all $n parts again"; }
  tar -C "$work" -xf "$work/bundle.tar" && rm "$work/bundle.tar"
  (cd "$work/bundle" && sha256sum --quiet -c SHA256SUMS) || die "bundle $id: SHA256SUMS failed"
  echo "bundle $id: $n parts joined, sums OK ($(cat "$work/bundle/BUILD"))"
  mkdir -p "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --disable-pip-version-check --root-user-action=ignore \
    --target "$SITE" "$work"/bundle/wheels/*.whl
  rm -rf "$SITE"/vllm "$SITE"/vllm-*.dist-info
  tar -C "$SITE" -xJf "$work"/bundle/vllm-*-trimmed.tar.xz
  echo "$id" >"$SITE/.vllm-bundle-id"
  rm -rf "$work"
  echo "installed into $SITE: vllm $(sed -n 's/^Version: //p' "$SITE"/vllm-*.dist-info/METADATA)" \
    "and $(ls -d "$SITE"/*.dist-info | wc -l) dists"
  host_check
  echo "run vLLM with: $ENVS python3 ..."
  [ "$check" = 0 ] || check
}

host_check() {  # what the installed wheels need and the GPU machine lacks (a warning only)
  (cd /tmp && PYTHONPATH="$SITE" "$PY" - "$SITE" <<'PY'
import sys
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
skipped, bad = [], []
for info in sorted(Path(sys.argv[1]).glob("*.dist-info")):
    dist = metadata.PathDistribution(info)
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = metadata.version(req.name)
            ok, why = req.specifier.contains(have, prereleases=True), f"has {have}"
        except metadata.PackageNotFoundError:
            ok, why = False, "missing"
        if not ok:
            (skipped if dist.name == "vllm" else bad).append(f"{dist.name}: {req} ({why})")
print(f"vllm requirements not met here, features the recipe leaves out ({len(skipped)}): "
      + "; ".join(s.split(": ", 1)[1] for s in skipped))
for b in bad:
    print("WARNING unmet:", b)
PY
  ) || echo "WARNING: could not check the requirements (no packaging module?)"
}

check() {  # import vllm from $SITE as a run would: its version, its CUDA ops, LLM
  [ -f "$SITE/.vllm-bundle-id" ] || die "no vllm bundle installed in $SITE: run install first"
  (cd "$R" && env $ENVS "$PY" - <<'PY'
import importlib, os, sys
import torch
import vllm
print("vllm", vllm.__version__, "from", os.path.dirname(vllm.__file__), "torch", torch.__version__)
failed = 0
for name in ("xgrammar", "llguidance", "vllm._C_stable_libtorch",
             "vllm.vllm_flash_attn._vllm_fa3_C", "vllm.entrypoints.llm"):
    try:
        importlib.import_module(name)
        print("  import", name, "OK")
    except Exception as exc:  # report each, then fail
        failed += 1
        print("  import", name, "FAILED:", type(exc).__name__, exc)
sys.exit(1 if failed else 0)
PY
  )
}

case ${1:-} in
  stash) shift; stash "$@" ;;
  install) shift; install "$@" ;;
  check) check ;;
  env) echo "export $ENVS" ;;
  *) die "usage: $0 stash [PART...] | install [--check] [PART...] | check | env" ;;
esac
