#!/usr/bin/env bash
# The built-in networks on a GPU, in one command per stage on the GPU machine:
#
#   bash bench/gpu_zoo.sh tests                 # the GPU tests packed as .carry/zoo/*_gpu.tar.gz (grouped/
#                                               # depthwise cuDNN convolutions, the fused ReLU6 and batch norm)
#   bash bench/gpu_zoo.sh bench [MODELS]        # octet bench train and the PyTorch peer (bench/peer_zoo.py
#                                               # on the same descriptions), epoch times at batch 128;
#                                               # MODES=eager,tuned (default also compile) for fewer modes
#   bash bench/gpu_zoo.sh accuracy EPOCHS [MODELS]  # train on full Fashion-MNIST, export to int8 (per-channel;
#                                               # the ablation's per-tensor row beside it)
#   bash bench/gpu_zoo.sh scaling [MODELS]      # octet bench scaling on 1 and 2 GPUs (needs 2), batch 128,
#                                               # f32 and bf16: the networks train data-parallel as ResNet-18 does
#
# Expects, in the ignored folder .carry/zoo/: octet.tar.gz (release, --features nccl), the test
# binaries NAME_gpu.tar.gz (as bash bench/gpu_tests.sh pack makes them), the descriptions NAME.json
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
    for a in "$C"/*_gpu.tar.gz; do
      t=$(basename "$a" .tar.gz)
      tar xzf "$a" -C /tmp/octet-zoo && /tmp/octet-zoo/"$t" --include-ignored --test-threads=1 \
        > "$OUT/$t.txt" 2>&1
      echo "$t: $(grep -E '^test result' "$OUT/$t.txt" || tail -3 "$OUT/$t.txt")"
      grep -E '^test .*FAILED' "$OUT/$t.txt"
    done
    ;;
  scaling)
    models=${2:-mobilenet-v2,ds-cnn}
    for m in ${models//,/ }; do
      "$BIN" bench scaling --model "$m" --gpus 1,2 --batch-sizes 128 --precisions f32,bf16 \
        --out "$OUT/scaling_$m" 2>&1 | tail -25
    done
    ;;
  bench)
    models=${2:-$models}
    "$BIN" bench train --models "$models" --batch-sizes 128 --images 50000 \
      --precision f32,bf16 --device cuda --out "$OUT/octet_zoo_bench.json" 2>&1 | tee "$OUT/octet_zoo_bench.txt"
    nets=(); for m in ${models//,/ }; do nets+=("$C/$m.json"); done
    PYTHONUNBUFFERED=1 python3 bench/peer_zoo.py "${nets[@]}" --mode "${MODES:-eager,tuned,compile}" \
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
