#!/usr/bin/env bash
# octet's int8 runtime against TensorFlow Lite Micro and TensorFlow Lite, byte for byte, on the
# Fashion-MNIST test split: each .o8 is converted (`octet convert`), run by octet
# (`octet run --logits`) and by the interpreters (bench/tflite_check.py), every logit compared.
# Writes $OUT (default bench/results/tflite_equivalence.json): per model and interpreter the
# differing bytes and images, with the machine, commit, command and package versions.
#
#   bench/tflite_equivalence.sh NAME=MODEL.o8 [NAME=MODEL.o8 ...]
#
# Environment: DATA (Fashion-MNIST IDX directory, default /usr/share/datasets/fashion-mnist),
# IMAGES (first N test images, 0 = all, the default), JOBS (processes per interpreter, default
# the cores), INTERPRETERS (default tflm,tflite,tflite-ref), and per model NAME_IMAGES and
# NAME_INTERPRETERS (NAME upper-cased) to run a model on fewer images or interpreters (TFLite
# Micro's reference kernels take about 0.3 s per ResNet-18 image on one core: name the model
# twice, e.g. resnet18=m.o8 resnet18_tflm=m.o8 with RESNET18_INTERPRETERS=tflite,tflite-ref
# RESNET18_TFLM_INTERPRETERS=tflm RESNET18_TFLM_IMAGES=1000).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 8,8p "$0"; exit 2; }
data=${DATA:-/usr/share/datasets/fashion-mnist}
out=${OUT:-bench/results/tflite_equivalence.json}
interpreters=${INTERPRETERS:-tflm,tflite,tflite-ref}
jobs=${JOBS:-$(nproc)}
work=target/tflite_equivalence
mkdir -p "$work" "$(dirname "$out")"
cargo build --release -p octet >&2
octet=target/release/octet

parts=()
for arg in "$@"; do
  name=${arg%%=*}
  o8=${arg#*=}
  var="${name^^}_IMAGES"
  images=${!var:-${IMAGES:-0}}
  var="${name^^}_INTERPRETERS"
  kinds=${!var:-$interpreters}
  "$octet" convert "$o8" -o "$work/$name.tflite" >&2
  python3 bench/tflite_check.py "$work/$name.tflite" --o8 "$o8" --octet "$octet" \
    --data "$data" --images "$images" --jobs "$jobs" --interpreters "$kinds" \
    --out "$work/$name.json" >/dev/null || [ $? -eq 1 ]
  parts+=("$name=$work/$name.json")
done

env=$(env | grep -E '^(DATA|IMAGES|JOBS|INTERPRETERS|[A-Z0-9_]+_(IMAGES|INTERPRETERS))=' | sort | tr '\n' ' ')
python3 bench/tflite_report.py "$out" \
  "int8 logits of octet's runtime vs TFLite Micro and TFLite on the same model (.o8 -> .tflite by octet convert)" \
  "$env$0 $*" "${parts[@]}"
