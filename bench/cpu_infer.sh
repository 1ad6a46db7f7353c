#!/usr/bin/env bash
# CPU inference benchmark in one command: octet's int8 runtime and candle f32 (criterion,
# benches/infer.rs) and the peer, ONNX Runtime fp32/int8 and TFLite int8
# (shared/peers/cpu/ort_bench.py), on this machine, one after the other.
# Writes bench/results/cpu_infer.json with both and the ratios. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PEER=${PEER:-../shared/peers/cpu}
python3 -c "import onnxruntime, numpy" 2>/dev/null || python3 -m pip install -q onnxruntime numpy
python3 -c "import ai_edge_litert" 2>/dev/null || python3 -m pip install -q ai-edge-litert || echo "TFLite peer unavailable"
rm -rf target/criterion
cargo bench --bench infer
RAYON_NUM_THREADS=1 cargo bench --bench infer -- candle
python3 "$PEER/ort_bench.py" --json target/ort_bench.json
python3 bench/merge_cpu.py target/criterion target/ort_bench.json "$(git describe --always --dirty --abbrev=12)" \
  > bench/results/cpu_infer.json
python3 - <<'PY'
import json
d = json.load(open("bench/results/cpu_infer.json"))
for r in d["summary"]:
    print(r)
PY
