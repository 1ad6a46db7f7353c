#!/usr/bin/env bash
# Prepares the MLPerf Tiny reference models (tests/data/mlperf_tiny) for the runtime's tests on
# other targets (aarch64 under QEMU, the Cortex-M firmware), which cannot import a .tflite
# themselves: for each model NAME, in DIR,
#   NAME.o8        `octet import` of the .tflite (TFLite's double rounding),
#   NAME.inputs    N seeded random inputs of its int8 input, one after another,
#   NAME.expected  the host's outputs for them (`octet run --inputs --kernels scalar`), which
#                  are TensorFlow Lite Micro's bytes (tests/mlperf_tiny.rs checks that on the host).
#
#   bash bench/imported_models.sh DIR [N]     # N inputs per model, default 4
#
# Uses $CARGO_TARGET_DIR (default target)/release/octet, built if missing. runtime/tests/imported.rs reads DIR from
# OCTET_IMPORTED_DIR; bench/mcu.sh takes the .o8 files.
set -euo pipefail
dir=${1:?usage: bench/imported_models.sh DIR [N]}
n=${2:-4}
cd "$(dirname "$0")/.."
octet=${CARGO_TARGET_DIR:-target}/release/octet
[ -x "$octet" ] || cargo build --release -p octet >&2
mkdir -p "$dir"
for m in pretrainedResnet_quant kws_ref_model ad01_int8 vww_96_int8; do
  "$octet" import "tests/data/mlperf_tiny/$m.tflite" -o "$dir/$m.o8" >/dev/null
  len=$("$octet" inspect "$dir/$m.o8" --json | python3 -c 'import json,sys,math; print(math.prod(json.load(sys.stdin)["input"]))')
  python3 -c "import random,sys; r=random.Random(7); sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range($n*$len)))" >"$dir/$m.inputs"
  "$octet" run "$dir/$m.o8" --inputs "$dir/$m.inputs" --logits "$dir/$m.expected" --kernels scalar --threads 1 >/dev/null
done
echo "$dir: $(ls "$dir" | wc -l) files for 4 models, $n inputs each" >&2
