#!/usr/bin/env bash
# The built-in networks on a GPU, in one command per stage on the GPU machine:
#
#   bash bench/gpu_zoo.sh tests                 # the grouped/depthwise cuDNN convolution tests
#   bash bench/gpu_zoo.sh bench [MODELS]        # octet bench train and the PyTorch peer (bench/peer_zoo.py
#                                               # on the same descriptions), epoch times at batch 128
#   bash bench/gpu_zoo.sh accuracy EPOCHS [MODELS]  # train on full Fashion-MNIST, export to int8 (per-channel;
#                                               # the ablation's per-tensor row beside it)
#
# Expects, in the ignored folder .carry/zoo/: octet.tar.gz (release, --features cuda),
# ops_gpu.tar.gz (bash bench/gpu_tests.sh pack's archive), the descriptions NAME.json
# (`octet describe NAME --json`), and .carry/fashion-mnist/*.gz. Writes $OUT (or bench/out);
# bench/merge_zoo.py turns that into bench/results/zoo_fashion_mnist.json here.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
C=.carry/zoo
BIN=/tmp/octet-zoo/octet
[ -x "$BIN" ] || { mkdir -p /tmp/octet-zoo && tar xzf "$C/octet.tar.gz" -C /tmp/octet-zoo; } || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
models=resnet8,mobilenet-v1,mobilenet-v2,ds-cnn
case "${1:-}" in
  tests)
    tar xzf "$C/ops_gpu.tar.gz" -C /tmp/octet-zoo && /tmp/octet-zoo/ops_gpu --include-ignored \
      --test-threads=1 2>&1 | tee "$OUT/ops_gpu.txt" | grep -E '^test |test result'
    ;;
  bench)
    models=${2:-$models}
    "$BIN" bench train --models "$models" --batch-sizes 128 --images 50000 \
      --precision f32,bf16 --device cuda --out "$OUT/octet_zoo_bench.json" 2>&1 | tee "$OUT/octet_zoo_bench.txt"
    nets=(); for m in ${models//,/ }; do nets+=("$C/$m.json"); done
    PYTHONUNBUFFERED=1 python3 bench/peer_zoo.py "${nets[@]}" --mode "${MODES:-eager,tuned}" \
      --out "$OUT/peer_zoo.json" 2>&1 | tee "$OUT/peer_zoo.txt"
    ;;
  accuracy)
    epochs=${2:?epochs}; models=${3:-$models}
    for m in ${models//,/ }; do
      "$BIN" train --model "$m" --data "fashion-mnist:.carry/fashion-mnist" --device cuda \
        --epochs "$epochs" --out "runs/zoo-$m" --no-plots --json > "$OUT/train_$m.jsonl" 2>"$OUT/train_$m.err"
      tail -2 "$OUT/train_$m.jsonl"
      "$BIN" export "runs/zoo-$m/last.safetensors" --device cuda --out "$OUT/$m.o8" --no-plots \
        --json > "$OUT/export_$m.json" 2>"$OUT/export_$m.err"
      python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(sys.argv[2], [(r["configuration"] if "configuration" in r else r.get("name"), r.get("accuracy")) for r in v["ablation"]["rows"]])' "$OUT/export_$m.json" "$m" || tail -3 "$OUT/export_$m.err"
    done
    ;;
  *) sed -n 2,13p "$0"; exit 2 ;;
esac
