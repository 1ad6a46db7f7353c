#!/usr/bin/env bash
# The MLPerf Tiny reference models on this CPU in one command: octet's int8 runtime
# (criterion, benches/mlperf_tiny.rs: the .tflite files imported) and TFLite with XNNPACK
# (bench/tflite_mlperf_tiny.py, ai-edge-litert) on the same files, interleaved: TFLite (two
# repeats), octet, TFLite (two repeats), octet; each figure is each engine's best run (their
# spread on a shared machine is wide), at batch 1 and 64 and 1 and 2 threads. Writes $OUT (default
# bench/results/cpu_mlperf_tiny.json): both, the ratios, the CPU and its SIMD features. Run it
# on a quiet machine; one file per CPU kind (OUT=bench/results/cpu_mlperf_tiny_<cpu>.json).
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-bench/results/cpu_mlperf_tiny.json}
# The command recorded in $OUT: this one, with OUT where it is not the default.
if [ "$OUT" = bench/results/cpu_mlperf_tiny.json ]; then
  export BENCH_COMMAND=${BENCH_COMMAND:-bash bench/cpu_mlperf_tiny.sh}
else
  export BENCH_COMMAND=${BENCH_COMMAND:-OUT=$OUT bash bench/cpu_mlperf_tiny.sh}
fi
python3 -c "import ai_edge_litert, numpy" 2>/dev/null || python3 -m pip install -q ai-edge-litert numpy
# Prebuilt benches (BENCH_BIN_DIR, COMMIT): bench/prebuilt.sh; CRITERION_ARGS shorten runs.
. bench/prebuilt.sh
rm -rf target/criterion target/criterion_first
bench_build mlperf_tiny
python3 bench/tflite_mlperf_tiny.py --repeats 2 --json target/tflite_mlperf_tiny_before.json
# shellcheck disable=SC2086
bench mlperf_tiny ${CRITERION_ARGS:-}
mv target/criterion target/criterion_first
python3 bench/tflite_mlperf_tiny.py --repeats 2 --json target/tflite_mlperf_tiny_after.json
# shellcheck disable=SC2086
bench mlperf_tiny ${CRITERION_ARGS:-}
python3 bench/merge_mlperf_cpu.py target/criterion_first,target/criterion \
  target/tflite_mlperf_tiny_before.json,target/tflite_mlperf_tiny_after.json \
  "$(bench_commit)" > "$OUT"
python3 - <<'PY'
import json, os
for r in json.load(open(os.environ["OUT"]))["summary"]:
    print(r)
PY
