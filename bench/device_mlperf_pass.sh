#!/usr/bin/env bash
# One pass on the GPU host (the `run` device, no toolchain): the runtime's tests with every kernel
# set there (pass 1 only), then one pass of bench/cpu_mlperf_tiny.sh from prebuilt binaries in
# .carry/bin (bench/prebuilt.sh; tests as rt_lib, rt_prepared, rt_parallel, rt_imported,
# t_mlperf_tiny; imported models in .carry/imported) and the ai-edge-litert wheels in .whl.
# Results under $OUT: amxN.json, benchN.log, criterionN.tgz (merge the passes with
# bench/merge_mlperf_cpu.py). Usage: COMMIT=<built from> bash bench/device_mlperf_pass.sh N
set -u
D=$OUT
. bench/device_lib.sh
device_setup
if [ "$1" = 1 ]; then
  for t in rt_lib rt_prepared rt_parallel; do echo "== $t"; ".carry/bin/$t" 2>&1 | grep -E "test result|FAILED|panicked|SKIP" | sort | uniq -c | head; done
  echo "== rt_imported"; OCTET_IMPORTED_DIR=.carry/imported .carry/bin/rt_imported 2>&1 | grep -E "test result|FAILED|panicked" | head
  # The other tests there run the `octet` binary, which is not carried.
  echo "== t_mlperf_tiny"; .carry/bin/t_mlperf_tiny threads_sharing batches_in_groups 2>&1 | grep -E "test result|FAILED|panicked" | head
fi
BENCH_BIN_DIR=$PWD/.carry/bin COMMIT=${COMMIT:-unknown} \
  CRITERION_ARGS="int8-a(mx|vx512) --warm-up-time 0.5 --measurement-time 1.5 --sample-size 10" \
  OUT="$D"/amx"$1".json taskset -c 2,3 bash bench/cpu_mlperf_tiny.sh > "$D"/bench"$1".log 2>&1
tail -9 "$D"/bench"$1".log
tar czf "$D"/criterion"$1".tgz target/criterion target/criterion_first target/tflite_mlperf_tiny_before.json target/tflite_mlperf_tiny_after.json 2>/dev/null
