#!/usr/bin/env bash
# One octet training run as two simulated nodes of one GPU each on NCCL's socket transport
# (the setting of bench/gpu_two_nodes.sh, without the peers), with a per-step timeline: for
# quick A/B runs of data-parallel settings on a 2-GPU machine.
#
#   bash bench/gpu_two_nodes_one.sh NAME [octet train flags...]
#   e.g. EPOCHS=3 bash bench/gpu_two_nodes_one.sh b512 --batch-size 512 --bucket-tail on
#
# Prints, for the last two epochs of node 0: epoch, --bucket-tail's choice, seconds, and the
# all-reduce's transfer, wait, exposed seconds and bus bandwidth; then timeline.py's rank-0
# lines on transfer and device step. Environment: BIN (folder of the `octet` binary,
# /tmp/octet-bin), EPOCHS (2), IMAGES (50000), OUT (bench/out); output in $OUT/one/NAME.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { sed -n 2,13p "$0"; exit 2; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
name=$1
shift
BIN=${BIN:-/tmp/octet-bin}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
d=${OUT:-bench/out}/one/$name
mkdir -p "$d"
for r in 0 1; do
  env NCCL_HOSTID=octet-sim-node$r CUDA_VISIBLE_DEVICES=$r timeout 300 "$BIN/octet" launch \
    --nnodes 2 --node-rank $r --gpus 1 --master-addr 127.0.0.1 --master-port "$port" -- \
    train --model resnet18 --data "synthetic:${IMAGES:-50000}:0" --device cuda --json \
    --epochs "${EPOCHS:-2}" --schedule constant --no-augment --out "$d/ckpt$r" --timeline "$d" \
    "$@" >"$d/node$r.out" 2>"$d/node$r.err" &
done
wait
rm -f "$d"/ckpt*/last.safetensors
grep '"epoch"' "$d/node0.out" | tail -2 | python3 -c "
import sys, json
for d in map(json.loads, sys.stdin):
    t = d['times']
    print('$name', d['epoch'], d.get('bucket_tail'), round(t['train_s'], 3), 'comm', round(t['comm_s'], 3),
          'wait', round(t['comm_wait_s'], 3), 'exposed', round(t.get('comm_exposed_s', 0), 3),
          'busbw', round(t['busbw_gbs'], 2))"
python3 bench/timeline.py "$d" >"$d/summary.txt" 2>&1
grep -A9 "rank 0" "$d/summary.txt" | grep -e xfer -e "device step"
