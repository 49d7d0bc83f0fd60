#!/usr/bin/env bash
# Issue 38's "numbers stay equal": the GPU engine and GRPO figures of the tree before the seams
# redesign (a `git archive` of it in .scratch/base.tar.gz, carried with .gpuwheels; TREES names
# more archives, e.g. intermediate merges to bisect a difference) against this
# tree, alternating, in one call on one card. Each tree runs its own copy of the benchmark.
#   git archive --format=tar.gz -o .scratch/base.tar.gz 27cc698
#   PARTS=engine ROUNDS=1 bash benchmarks/gpu_seams_check.sh   # then other parts/rounds, warm host
# Results: $OUT/seams_<part>_<tree>_<round>.json and $OUT/seams_log.txt.
set -u
R=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"; L=$OUT/seams_log.txt
. "$R/benchmarks/gpu_env.sh" || { echo "INSTALL_FAIL" >>"$L"; exit 1; }
install_tree() {  # a tree NAME from .scratch/NAME.tar.gz into /tmp/tree_NAME, installed in /tmp/site_NAME
  local name=$1
  [ -d "/tmp/site_$name/agentrl" ] && [ -d "/tmp/tree_$name/benchmarks" ] && return
  rm -rf "/tmp/tree_$name" && mkdir -p "/tmp/tree_$name" && tar xzf "$R/.scratch/$name.tar.gz" -C "/tmp/tree_$name"
  python3 -m pip install -q --no-index --find-links "$R/.gpuwheels" --no-deps --no-compile \
    --target "/tmp/site_$name" "/tmp/tree_$name" 2>&1 | tail -2
}
run() {  # run TREE NAME SECONDS ARGS...   (TREE: head = this tree, else .scratch/TREE.tar.gz)
  local tree=$1 name=$2 secs=$3; shift 3
  local src=$R pp=$PYTHONPATH
  if [ "$tree" != head ]; then install_tree "$tree"; src=/tmp/tree_$tree; pp=/tmp/site_$tree:$PYTHONPATH; fi
  echo "== $name $tree $(date -u +%T)" >>"$L"
  (cd /tmp && PYTHONPATH=$pp timeout "$secs" python3 "$src/benchmarks/$@" >>"$L" 2>&1); echo "== $name $tree rc=$?" >>"$L"
}
for part in ${PARTS:-engine grpo}; do
  for round in ${ROUNDS:-1 2}; do
    for tree in ${TREES:-base head}; do
      case $part in
        engine) run $tree engine 200 gpu_engine.py --batches 1,64,256 --skip-check \
          --json "$OUT/seams_engine_${tree}_${round}.json" ;;
        grpo) run $tree grpo 200 gpu_grpo.py --part agentrl --micro 128 --max-turns 1 --packing \
          --json "$OUT/seams_grpo_${tree}_${round}.json" ;;
        pipelined) run $tree pipelined 150 gpu_grpo.py --micro 128 --packing --steps 6 --warmup 1 \
          --max-staleness 2:thread:384 --tool-latency 0.02 0.5 --sft-cache /tmp/sftc \
          --json "$OUT/seams_pipelined_${tree}_${round}.json" ;;
        async) run $tree async 280 gpu_grpo.py --micro 128 --packing --steps 6 --warmup 1 \
          --max-staleness 0 2:thread:384 --tool-latency 0.02 0.5 \
          --json "$OUT/seams_async_${tree}_${round}.json" ;;
      esac
    done
  done
done
grep -E "^== |Error|tok/s" "$L" | tail -60
