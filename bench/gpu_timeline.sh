#!/usr/bin/env bash
# Per-rank, per-step timelines of ResNet-18 training on 1 and 2 GPUs (the scaling protocol:
# synthetic 50,000 images, 2 epochs, constant lr, no augmentation), summarised by
# bench/timeline.py: where each rank's step time goes, who waits for whom and why.
#
#   bash bench/gpu_timeline.sh [BATCHES]   # default: 512 128 32 on 2 GPUs, 512 on 1
#
# Expects .carry/octet.tar.gz (built with --features nccl). Writes $OUT/tl.tar.gz (the CSVs
# and a summary.json per run).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
OUT=${OUT:-bench/out}
mkdir -p /tmp/o && tar xzf .carry/octet.tar.gz -C /tmp/o || exit 1
B=/tmp/o/octet
T=$OUT/tl; mkdir -p "$T"
common=(--model resnet18 --device cuda --json --data synthetic:50000:0 --epochs 2 --schedule constant --no-augment)
"$B" train "${common[@]}" --batch-size 512 --out /tmp/r1 --timeline "$T/g1_b512" > /dev/null
for b in ${1:-512 128 32}; do
  "$B" launch --gpus 2 -- train "${common[@]}" --batch-size "$b" --out "/tmp/r2_$b" --timeline "$T/g2_b$b" > /dev/null
done
for d in "$T"/*; do echo "== $d"; python3 bench/timeline.py "$d" --json "$d/summary.json"; done
tar czf "$OUT/tl.tar.gz" -C "$OUT" tl && rm -rf "$T"
