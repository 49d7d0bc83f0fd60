#!/usr/bin/env bash
# Carry files larger than one device call (64 MiB with the working tree) to the GPU machine:
# the learning matrix's model files (SmolLM2's and Gemma 3's GGUFs), the wheels the GPU image
# lacks and the bubblewrap .deb, in parts that fit one call each.
#   here:  bash benchmarks/gpu_bundle.sh pack NAME MB PATH...   # .gpuparts/NAME/NAME-ID.partIofN
#   GPU, calls 1..N-1, back to back (the machine keeps /tmp ~30 s between calls):
#          bash benchmarks/gpu_bundle.sh stash NAME              # carry: .gpuparts/NAME/<one part>
#   GPU, call N (carrying the last part):
#          bash benchmarks/gpu_bundle.sh unpack NAME DEST && <your run>
# ID is the first 12 hex digits of the whole tar's sha256: `unpack` refuses a bundle whose
# joined parts hash to anything else (a damaged or missing part) and names the missing parts.
# vLLM's own bundle (a trimmed tree and pinned wheels) is vllm_gpu_bundle.sh/vllm_gpu_install.sh.
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
STASH=${BUNDLE_STASH:-/tmp/bundle-parts}
die() { echo "gpu_bundle: $*" >&2; exit 1; }

pack() {  # pack NAME MB PATH...: a tar of PATHs (relative names kept) cut into MB-sized parts
  local name=$1 mb=$2; shift 2
  [ $# -gt 0 ] || die "pack: no paths"
  local out="$R/.gpuparts/$name" tmp
  tmp=$(mktemp -d)
  tar -cf "$tmp/b.tar" "$@"
  local id; id=$(sha256sum "$tmp/b.tar" | cut -c1-12)
  rm -rf "$out" && mkdir -p "$out"
  split -b "${mb}M" -d -a 1 "$tmp/b.tar" "$tmp/p."
  local parts=("$tmp"/p.*) i=1
  for p in "${parts[@]}"; do
    mv "$p" "$out/$name-$id.part${i}of${#parts[@]}"
    i=$((i + 1))
  done
  rm -rf "$tmp"
  ls -l "$out"
}

stash() {  # stash NAME: copy the carried parts of NAME into $STASH
  local name=$1 f n=0
  mkdir -p "$STASH/$name"
  for f in "$R/.gpuparts/$name/$name"-*.part*; do
    [ -f "$f" ] || continue
    cp "$f" "$STASH/$name/" && n=$((n + 1))
    echo "stashed $(basename "$f") ($(stat -c %s "$f") bytes)"
  done
  [ "$n" -gt 0 ] || [ "${QUIET_NONE:-0}" = 1 ] || die "no part of $name carried in .gpuparts/$name/"
}

unpack() {  # unpack NAME DEST: stash what this call carries, join, check, untar into DEST
  local name=$1 dest=$2
  QUIET_NONE=1 stash "$name"
  local first id n i missing=() files=()
  first=$(ls "$STASH/$name"/ 2>/dev/null | head -1) || :
  [ -n "$first" ] || die "no parts of $name on this machine: stash them again, one call each"
  [[ $first =~ ^$name-([0-9a-f]{12})\.part[0-9]+of([0-9]+)$ ]] || die "odd part name $first"
  id=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
  for i in $(seq 1 "$n"); do
    if [ -f "$STASH/$name/$name-$id.part${i}of$n" ]; then files+=("$STASH/$name/$name-$id.part${i}of$n")
    else missing+=("$i"); fi
  done
  [ ${#missing[@]} -eq 0 ] || die "$name $id: part(s) ${missing[*]} of $n missing (the machine" \
    "keeps files ~30 s between calls, or was replaced): stash them again, back to back"
  mkdir -p "$dest"
  cat "${files[@]}" >"$STASH/$name.tar"
  local got; got=$(sha256sum "$STASH/$name.tar" | cut -c1-12)
  [ "$got" = "$id" ] || { rm -f "$STASH/$name.tar"; die "$name: joined parts hash to $got, not $id"; }
  tar -C "$dest" -xf "$STASH/$name.tar" && rm -f "$STASH/$name.tar"
  echo "$name $id: $n parts joined and checked into $dest"
}

cmd=${1:-}; shift || :
case $cmd in
  pack) pack "$@" ;;
  stash) stash "$@" ;;
  unpack) unpack "$@" ;;
  *) die "usage: gpu_bundle.sh pack NAME MB PATH... | stash NAME | unpack NAME DEST" ;;
esac
