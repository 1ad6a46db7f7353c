#!/usr/bin/env bash
# CPU inference benchmark in one command: octet's int8 runtime and candle f32 (criterion,
# benches/infer.rs) and the peer, ONNX Runtime fp32/int8 and TFLite int8
# (shared/peers/cpu/ort_bench.py), on this machine, one after the other.
# Writes $OUT (default bench/results/cpu_infer.json) with both, the ratios, the CPU and its SIMD
# features. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PEER=${PEER:-../shared/peers/cpu}
# One file per CPU kind (e.g. OUT=bench/results/cpu_infer_avx2.json): the file names the CPU
# and its SIMD features, and every row the kernels that ran.
export OUT=${OUT:-bench/results/cpu_infer.json}
python3 -c "import onnxruntime, numpy" 2>/dev/null || python3 -m pip install -q onnxruntime numpy
python3 -c "import ai_edge_litert" 2>/dev/null || python3 -m pip install -q ai-edge-litert || echo "TFLite peer unavailable"
# Prebuilt benches (BENCH_BIN_DIR, COMMIT): bench/prebuilt.sh. INFER_FILTER (a criterion
# filter: int8, resnet18/int8-amx, ...) times only the rows it matches (candle f32's one-thread
# rows only if it names candle); CRITERION_ARGS shorten runs (--measurement-time 2, ...).
. bench/prebuilt.sh
rm -rf target/criterion
# shellcheck disable=SC2086
bench infer ${INFER_FILTER:-} ${CRITERION_ARGS:-}
case "${INFER_FILTER:-}" in
  "" | *candle*)
    # shellcheck disable=SC2086
    RAYON_NUM_THREADS=1 bench infer candle ${CRITERION_ARGS:-}
    ;;
esac
python3 "$PEER/ort_bench.py" --json target/ort_bench.json
python3 bench/merge_cpu.py target/criterion target/ort_bench.json "$(bench_commit)" > "$OUT"
python3 - <<'PY'
import json
import os; d = json.load(open(os.environ["OUT"]))
for r in d["summary"]:
    print(r)
PY
