#!/usr/bin/env bash
# octet against stock TensorFlow Lite Micro (pip tflite-micro: reference kernels, TFLite's
# default double rounding), byte for byte, on the models the embedded field runs: the MLPerf
# Tiny reference models (tests/data/mlperf_tiny: image classification, keyword spotting,
# anomaly detection, visual wake words) on seeded random int8 inputs, and octet's own LeNet and
# ResNet-18 `.tflite` exports on the Fashion-MNIST test images. octet runs each `.tflite`
# itself (`octet run` imports it); bench/tflite_check.py runs TFLite Micro and compares every
# output byte. Writes $OUT (default bench/results/tflm_mlperf_tiny.json) with the machine,
# commit, command and package versions.
#
#   bench/tflm_equivalence.sh [lenet=CHECKPOINT] [resnet18=CHECKPOINT]
#
# Each NAME=CHECKPOINT is exported with default flags (`octet export --format both`: TFLite's
# rounding) and its .tflite checked on the first $INPUTS test images of $DATA.
# Environment: INPUTS (per model, default 1000), SEED (random inputs, default 1), JOBS
# (TFLite Micro processes, default the cores), DATA (Fashion-MNIST IDX directory, default
# /usr/share/datasets/fashion-mnist), INTERPRETERS (default tflm; tflite,tflite-ref add TFLite's).
set -euo pipefail
cd "$(dirname "$0")/.."
inputs=${INPUTS:-1000}
seed=${SEED:-1}
jobs=${JOBS:-$(nproc)}
data=${DATA:-/usr/share/datasets/fashion-mnist}
interpreters=${INTERPRETERS:-tflm}
out=${OUT:-bench/results/tflm_mlperf_tiny.json}
work=target/tflm_equivalence
mkdir -p "$work" "$(dirname "$out")"
cargo build --release -p octet >&2
octet=target/release/octet

parts=()
check() { # NAME MODEL.tflite ARGS...
  local name=$1 model=$2
  shift 2
  python3 bench/tflite_check.py "$model" --octet "$octet" --jobs "$jobs" \
    --interpreters "$interpreters" --out "$work/$name.json" "$@" >/dev/null || [ $? -eq 1 ]
  parts+=("$name=$work/$name.json")
}
for m in pretrainedResnet_quant kws_ref_model ad01_int8 vww_96_int8; do
  check "$m" "tests/data/mlperf_tiny/$m.tflite" --random "$inputs" --seed "$seed"
done
for arg in "$@"; do
  name=${arg%%=*}
  ckpt=${arg#*=}
  "$octet" export "$ckpt" -o "$work/$name.o8" --format both --no-plots >&2
  check "$name" "$work/$name.tflite" --data "$data" --images "$inputs"
done

env=$(env | grep -E '^(INPUTS|SEED|JOBS|DATA|INTERPRETERS|OUT)=' | sort | tr '\n' ' ')
python3 bench/tflite_report.py "$out" \
  "output bytes of octet (the .tflite imported by octet run) vs stock TensorFlow Lite Micro on the same .tflite and inputs" \
  "$env$0 $*" "${parts[@]}"
