#!/usr/bin/env bash
# Every H200 figure in BENCHMARKS.md in one command, for the device tool (or any CUDA host):
#   bash benchmarks/gpu_run_all.sh            # results and a log under ${OUT:-/tmp/gpu_out}
#   PARTS="engine-b1 grpo-single-turn" bash benchmarks/gpu_run_all.sh   # a subset (the device
#                                              # tool caps one command at 600 s: split runs)
# Wheels the GPU host lacks (trl, megatron-core, gymnasium, ...) are installed from
# .gpuwheels/ when present (carry it); everything else must already be there (torch,
# transformers, triton). Each part has its own timeout so one slow part cannot eat the rest;
# JSONs are written as parts finish. Inductor kernels are cached in /tmp/ind across parts.
set -u
R=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"; L=$OUT/log.txt
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind
. "$R/benchmarks/gpu_env.sh" || echo "INSTALL_FAIL" >>"$L"
cd /tmp
part() {  # part NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  case " ${PARTS:-$name} " in *" $name "*) ;; *) return ;; esac
  echo "== $name $(date -u +%T)" >>"$L"
  timeout "$secs" "$@" >>"$L" 2>&1; echo "== $name rc=$?" >>"$L"
}
B=$R/benchmarks
part engine-b1 120 python3 "$B/gpu_engine.py" --batches 1 --episodes 1 --turns 1 --skip-check \
  --compile-decode --json "$OUT/gpu_engine_compiled_b1.json"
part engine 240 python3 "$B/gpu_engine.py" --compare-chunk1 --json "$OUT/gpu_engine.json"
part grpo-single-turn 240 python3 "$B/gpu_grpo.py" --micro 128 --max-turns 1 --packing \
  --profile --json "$OUT/gpu_grpo_single_turn.json"
part grpo-multi-turn 230 python3 "$B/gpu_grpo.py" --part agentrl --micro 128 --packing \
  --compile --engine-extra compile_decode=true --json "$OUT/gpu_grpo_multiturn.json"
part grpo-single-turn-compiled 300 python3 "$B/gpu_grpo.py" --micro 128 --max-turns 1 --packing \
  --compile --profile --engine-extra compile_decode=true --json "$OUT/gpu_grpo_single_turn_compiled.json"
part grpo-1.5b 300 python3 "$B/gpu_grpo.py" --shape qwen2.5-1.5b --micro 64 --max-turns 1 \
  --packing --compile --engine-extra compile_decode=true --json "$OUT/gpu_grpo_1.5b.json"
# trainer.async (issue #21): the synchronous loop vs pipelined steps on the multi-turn tool
# workload (tools 0.02-0.5 s), the rollout on a thread or in its own process, K + 1 batches in
# flight; then quickstart-gpu synchronous vs K = 1 (process), 3 seeds, curves in one PNG; then
# the update's speed levers (traced attention, ...).
part grpo-async 540 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 6 \
  --max-staleness 0 1 1:process 1:process:256 2:process:384 --tool-latency 0.02 0.5 \
  --json "$OUT/gpu_grpo_async.json"
# The engine on its own high-priority CUDA stream (the own_stream lever, session 8): the
# thread producer against the shared stream, the process producer and the synchronous loop.
part grpo-async-streams 560 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness 0 1:thread:256 1:thread:256,bench.lever.own_stream=false 1:process:256 \
  2:thread:384 1:thread:256,python.switchinterval=0.0005 0 --tool-latency 0.02 0.5 \
  --json "$OUT/gpu_grpo_async_streams.json"
# Parked sessions keep their KV across in-flight updates (engine.hf.keep_kv_on_update, null:
# on for K >= 1, session 8) against recomputing every prefix.
part grpo-async-kv 560 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness 0 1:thread:256 1:thread:256,engine.hf.keep_kv_on_update=false \
  1:process:256 2:thread:384 2:process:384 0 --tool-latency 0.02 0.5 \
  --json "$OUT/gpu_grpo_async_kv.json"
# The compiled prefill (engine.hf.tuning.compile_prefill, session 8): eager prefill is host-bound
# (20-40 ms a call whatever its size), the pipelined rollout's main engine cost.
CP=engine.hf.tuning.compile_prefill=true
part grpo-async-prefill 480 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$CP" "1:thread:256,$CP" "2:thread:384,$CP" "1:process:256,$CP" 0 "0,$CP" \
  --tool-latency 0.02 0.5 --json "$OUT/gpu_grpo_async_prefill.json"
# One more step per mode under torch.profiler (session 9): is the update slowed beside the
# engine waiting on the GPU (another stream's kernels) or on its host thread (device idle)?
# (diagnostics/gpu_step_trace.py: per CUDA stream, kernel time, overlap, and gaps with the device idle.)
# And the compiled update (trainer.compile) in both loops. The SFT'd weights are kept in
# /tmp/sftc for the warm host's next call.
TC=trainer.compile=true
part grpo-async-trace 570 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 6 \
  --max-staleness "0,$CP" "2:thread:384,$CP" "2:thread:384,$CP,$TC" "0,$CP,$TC" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc --trace-dir /tmp/traces \
  --json "$OUT/gpu_grpo_async_trace.json"
# Everything compiled (session 9): prefill, decode (captured into the graphs) and the update.
ALL="$CP,engine.hf.tuning.compile_decode=true,$TC"
part grpo-async-compiled 580 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 10 \
  --max-staleness "0,$ALL" "2:thread:384,$ALL" "1:thread:256,$ALL" "0,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc --json "$OUT/gpu_grpo_async_compiled_all.json"
# The repeat (session 9), with the interpreter-lock probe: synchronous twice, the thread
# producer at the default and a 0.5 ms switch interval, K = 1, and the process producer.
part grpo-async-compiled-2 590 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 10 \
  --max-staleness "0,$ALL" "2:thread:384,$ALL" "0,$ALL" \
  "2:thread:384,$ALL,python.switchinterval=0.0005" "1:thread:256,$ALL" "2:process:384,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc --json "$OUT/gpu_grpo_async_compiled_2.json"
# Settle the all-compiled ratio (session 10): after the first compile and capture, a mode
# costs ~15 s on a warm host, so the synchronous loop and K = 2 on a thread alternate four
# times (the first synchronous run is the burn-in; the sweep also reports against the
# synchronous runs after it), with joins every 4 decode steps (engine.hf.tuning.join_every: fewer
# prefill calls) twice, and one synchronous and one pipelined mode under the stack sampler
# (diagnostics/stack_sampler.py: where each thread's wall time goes).
part grpo-async-settle 560 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$ALL" "2:thread:384,$ALL" "0,$ALL" "2:thread:384,$ALL,engine.hf.tuning.join_every=4" \
  "2:thread:384,$ALL" "0,$ALL" "2:thread:384,$ALL,engine.hf.tuning.join_every=4" "2:thread:384,$ALL" \
  "0,$ALL" "2:thread:384,$ALL,bench.stack_sample" "0,$ALL,bench.stack_sample" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc \
  --json "$OUT/gpu_grpo_async_settle.json"
# Prefill as CUDA-graph replays (the prefill_graphs lever, session 10): the settle sweep's
# stack sampler found the pipelined engine thread in the compiled prefill 48% of its time
# (52 ms a call against 21 ms synchronous). Both loops with and without it, K = 2 with joins
# every 4 decode steps. A fresh host spends ~390 s before the third mode (SFT, the first
# compiles, the 384-row graphs), so session 10's 9-mode run got 2 modes: this part has 6
# and 580 s; run grpo-async-pgraphs-2 right after it on the same warm host for the repeats.
PG=bench.lever.prefill_graphs=true
J4=engine.hf.tuning.join_every=4
part grpo-async-pgraphs 580 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$ALL" "2:thread:384,$ALL,$PG,$J4" "0,$ALL,$PG" "2:thread:384,$ALL,$J4" \
  "0,$ALL" "2:thread:384,$ALL,$PG,$J4" --tool-latency 0.02 0.5 --sft-cache /tmp/sftc \
  --json "$OUT/gpu_grpo_async_pgraphs.json"
part grpo-async-pgraphs-2 580 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$ALL,$PG" "2:thread:384,$ALL,$PG,$J4" "0,$ALL" "2:thread:384,$ALL,$J4" \
  "2:thread:384,$ALL,$PG" "0,$ALL,$PG" "2:thread:384,$ALL,$PG,$J4" "2:thread:384,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc --json "$OUT/gpu_grpo_async_pgraphs_2.json"
# The rollout in its own process with everything compiled and joins every 4 decode steps
# (session 11): the session-10/11 sweeps found the thread producer's spread tied to the
# trainer process's interpreter lock (mode runs with a GIL wait of 0.7 ms made 7,500-7,900
# tok/s, those with 1.2-1.9 ms 4,500-6,400); the child has an interpreter of its own. Sized
# for a fresh host (SFT and the first compiles ~260 s): the process modes alternate with
# the synchronous loop as time allows.
part grpo-async-process-j4 560 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$ALL" "2:process:384,$ALL,$J4" "0,$ALL" "2:process:384,$ALL,$J4" "0,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc \
  --json "$OUT/gpu_grpo_async_process_j4.json"
# Python's full collections at step boundaries (trainer.gc_every, default 50; session 11):
# 6 of 14 pipelined runs and the first synchronous mode of every sweep had one step of
# 1.6-3.2 s, and the update benchmark caught a 467 ms collection inside an update. With and
# without the schedule (trainer.gc_every=0: Python's own), alternating; the sweep now
# records every collection in the timed steps (gc2_count, gc2_max_ms) and the longest wait
# of the lock probe. Sized for a fresh host.
G0=trainer.gc_every=0
part grpo-async-gc 580 python3 "$B/gpu_grpo.py" --micro 128 --packing --steps 12 \
  --max-staleness "0,$ALL,$G0" "2:thread:384,$ALL,$J4,$G0" "0,$ALL" "2:thread:384,$ALL,$J4" \
  "0,$ALL,$G0" "2:thread:384,$ALL,$J4" "2:thread:384,$ALL,$J4,$G0" "0,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc --json "$OUT/gpu_grpo_async_gc.json"
# The engine's GPU tests alone (prefill graphs, streams, the fast path), for a short call.
part tests-engine 110 python3 -m pytest -q -p no:cacheprovider -m gpu \
  "$R/tests/engines/test_prefill_graphs.py" "$R/tests/engines/test_engine_stream_gpu.py" \
  "$R/tests/engines/test_fast_path_gpu.py"
# The process producer with everything compiled (its child compiles the engine again, from
# the warm inductor cache): session 9's run of it ran past the call limit.
part grpo-async-process-compiled 590 python3 "$B/gpu_grpo.py" --micro 128 --packing \
  --steps 10 --max-staleness "0,$ALL" "2:process:384,$ALL" "1:process:256,$ALL" "0,$ALL" \
  --tool-latency 0.02 0.5 --sft-cache /tmp/sftc \
  --json "$OUT/gpu_grpo_async_process_compiled.json"
part async-learning 540 python3 "$B/gpu_async_learning.py" --out "$OUT/async_learning" \
  --seeds 0 1 2 --producer process --timeout 140 --json "$OUT/gpu_async_learning.json"
part update-mfu 400 python3 "$B/gpu_update_mfu.py" --profile --json "$OUT/gpu_update_mfu.json"
part prefill 90 python3 "$B/diagnostics/gpu_prefill_attention.py" --json "$OUT/gpu_prefill_attention.json"
part weight-sync 60 python3 "$B/gpu_weight_sync.py" --json "$OUT/gpu_weight_sync.json"
part megatron 90 python3 "$B/gpu_megatron.py" --json "$OUT/gpu_megatron.json"
# SmolLM2-135M-Instruct learns the calculator (gpu_smollm2.py): the GGUF file (or HF dir) in
# AGENTRL_SMOLLM2, the gguf package importable. `train` resumes across calls until done.
SM=(--model "${AGENTRL_SMOLLM2:-smollm2-135m-instruct}" --out "$OUT/smollm2")
part smollm2-eval-base 400 python3 "$B/gpu_smollm2.py" --part eval_base "${SM[@]}"
part smollm2-train 590 python3 "$B/gpu_smollm2.py" --part train "${SM[@]}"
part smollm2-eval-after 300 python3 "$B/gpu_smollm2.py" --part eval_after "${SM[@]}"
part smollm2-bench 400 python3 "$B/gpu_smollm2.py" --part bench "${SM[@]}"
part tests 300 python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests"
# The update's MFU as training runs it (session 10): the shipped default (`traced`) and the
# fused-head combination, many back-to-back updates each, no profiling; then the GPU suite
# less the engine files `tests-engine` runs.
part update-mfu-repeat 190 python3 "$B/gpu_update_mfu.py" --variants traced combined --reps 20 \
  --budget-s 120 --json "$OUT/gpu_update_mfu_repeat.json"
# The update alone, one variant (the shipped default), 80 back-to-back updates: is the slow
# phase seen at the start of update-mfu-repeat (8 rounds of ~200 ms, then ~124 ms) tied to
# the time since the process started?
part update-mfu-long 150 python3 "$B/gpu_update_mfu.py" --variants traced --reps 80 \
  --budget-s 100 --json "$OUT/gpu_update_mfu_long.json"
part tests-rest 220 python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests" \
  --ignore="$R/tests/engines/test_prefill_graphs.py" \
  --ignore="$R/tests/engines/test_engine_stream_gpu.py" \
  --ignore="$R/tests/engines/test_fast_path_gpu.py"
grep -E "^== |Error" "$L" | tail -40
