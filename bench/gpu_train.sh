#!/usr/bin/env bash
# The GPU training benchmark and acceptance runs, in one command on the GPU machine.
#
#   bash bench/gpu_train.sh bench [IMAGES] [PRECISIONS]  # octet bench train (f32,bf16 by default) + PyTorch peer, same command
#   bash bench/gpu_train.sh lenet            # LeNet on full Fashion-MNIST, 15 epochs
#   bash bench/gpu_train.sh resnet [EPOCHS] [PRECISION]  # ResNet-18 on full Fashion-MNIST, 10 epochs (resumes runs/gpu-resnet18[-bf16])
#
# OCTET_BENCH_MODELS and OCTET_BENCH_BATCHES narrow the bench stage (defaults: lenet,resnet18 and
# 32,...,32768, each series stopping at its first out-of-memory batch).
#   bash bench/gpu_train.sh oom              # a batch too large for the GPU: expect a clear error
#   bash bench/gpu_train.sh ab [ROUNDS] [IMAGES]  # a change against its baseline build, interleaved
#     (.carry/octet_old.tar.gz is the baseline; OCTET_BENCH_MODELS/_BATCHES narrow it, default
#     lenet,resnet18 at 128,512, f32 and bf16); unpack $OUT/ab.tar.gz, merge with bench/merge_ab.py
#
# Expects, in the ignored folder .carry/: octet.tar.gz (the release binary built with
# --features cuda), peer_torch.py (from shared/peers), fashion-mnist/*.gz. Writes to $OUT
# (or bench/out). Merge bench results here afterwards with bench/merge_train.py.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
C=.carry
BIN=/tmp/octet-bin/octet
if [ ! -x "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf "$C/octet.tar.gz" -C /tmp/octet-bin || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
stage=${1:-bench}
case "$stage" in
  bench)
    images=${2:-50000}
    precisions=${3:-f32,bf16}
    quick=""; [ "$images" = 10000 ] && quick="--quick"
    # Batches grow until the GPU runs out of memory; the failing batch is reported.
    timeout "${OCTET_BENCH_LIMIT:-900}" "$BIN" bench train --models "${OCTET_BENCH_MODELS:-lenet,resnet18}" \
      --batch-sizes "${OCTET_BENCH_BATCHES:-32,128,512,2048,4096,8192,16384,32768}" --images "$images" \
      --precision "$precisions" --device cuda --out "$OUT/octet_train.json" 2>&1 | tee "$OUT/octet_train.txt"
    PYTHONUNBUFFERED=1 python3 "$C/peer_torch.py" $quick --out "$OUT" 2>&1 | tee "$OUT/peer.txt"
    ;;
  lenet)
    "$BIN" train --model lenet --data "fashion-mnist:$C/fashion-mnist" --device cuda --epochs 15 \
      --no-augment --out "$OUT/lenet" --json 2>&1 | tee "$OUT/lenet.jsonl"
    rm -f "$OUT/lenet/last.safetensors"
    ;;
  resnet)
    precision=${3:-f32}
    run=runs/gpu-resnet18; tag=resnet
    [ "$precision" = f32 ] || { run=$run-$precision; tag=resnet_$precision; }
    args=(--stop-after "${2:-10}" --device cuda --json)
    if [ -f "$run/last.safetensors" ]; then
      "$BIN" train --resume "$run/last.safetensors" "${args[@]}" 2>&1 | tee -a "$OUT/$tag.jsonl"
    else
      "$BIN" train --model resnet18 --data "fashion-mnist:$C/fashion-mnist" --epochs 10 --out "$run" \
        --precision "$precision" "${args[@]}" 2>&1 | tee "$OUT/$tag.jsonl"
    fi
    cp "$run/metrics.csv" "$OUT/${tag}_metrics.csv"
    # A finished run's weights come back without momentum, in parts under the 16 MiB file limit.
    if [ "$precision" = f32 ] && grep -q '"epochs_done":10' "$OUT/$tag.jsonl"; then
      python3 - "$run/last.safetensors" /tmp/resnet18_weights.safetensors <<'PY'
import sys
from safetensors import safe_open
from safetensors.torch import save_file
with safe_open(sys.argv[1], "pt") as f:
    t = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("optim.")}
    save_file(t, sys.argv[2], metadata=f.metadata())
PY
      split -b 15M -d /tmp/resnet18_weights.safetensors "$OUT/resnet18_weights.part"
    fi
    ;;
  ab)
    # Alternating processes cancel drift between them (clocks, the driver's caches); the side
    # that goes first alternates too (the first process of a call ran fastest, NOTES §7).
    OLD=/tmp/octet-old/octet
    if [ ! -x "$OLD" ]; then
      mkdir -p /tmp/octet-old && tar xzf "$C/octet_old.tar.gz" -C /tmp/octet-old || exit 1
    fi
    # Results go into one archive: a device call returns at most 8 files.
    ab=$(mktemp -d)
    for i in $(seq "${2:-2}"); do
      order="old new"; [ $((i % 2)) = 0 ] && order="new old"
      for b in $order; do
        bin=$BIN; [ $b = old ] && bin=$OLD
        timeout 300 "$bin" bench train --models "${OCTET_BENCH_MODELS:-lenet,resnet18}" \
          --batch-sizes "${OCTET_BENCH_BATCHES:-128,512}" --images "${3:-50000}" \
          --precision f32,bf16 --device cuda --out "$ab/ab_$b$i.json" > "$ab/ab_$b$i.txt" 2>&1
        echo "$b round $i: exit $?"
      done
    done
    cp "$OUT/gpu.txt" "$ab/" && tar czf "$OUT/ab.tar.gz" -C "$ab" .
    ;;
  oom)
    "$BIN" train --model resnet18 --data synthetic:16384:0 --batch-size 16384 --epochs 1 --device cuda \
      --out /tmp/oom 2>&1 | tee "$OUT/oom.txt"
    grep -q "does not fit in GPU memory" "$OUT/oom.txt" && echo "OOM: clear error, as expected"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
