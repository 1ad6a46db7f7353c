#!/usr/bin/env bash
# The multi-GPU scaling report in one command on an N-GPU machine: the PyTorch DDP peer
# (torchrun shared/peers/peer_torch.py --ddp, and peer_allreduce.py) for each GPU count, then
# `octet bench scaling` with the peer's epoch times beside octet's.
#
#   bash bench/gpu_scaling.sh [all|peers|octet] [GPUS] [IMAGES] [ACCURACY_MODEL]
#   # defaults: all 1,2 50000 resnet18. `peers` runs only the PyTorch side (into runs/scaling,
#   # which stays on a warm machine), `octet` the rest (running the peers first if missing), so
#   # the two halves fit the device's 10-minute calls.
#
# Expects, in the ignored folder .carry/: octet.tar.gz (release binary built with
# --features nccl), peer_torch.py and peer_allreduce.py (from shared/peers),
# fashion-mnist/*.gz for the accuracy rows. Writes $OUT/scaling.tar.gz (report.md, report.json,
# plots, all-reduce and peer JSON) and $OUT/log.txt.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One JIT of candle's PTX serves every later process.
export CUDA_CACHE_MAXSIZE=4294967296
OUT=${OUT:-bench/out}
C=.carry
stage=${1:-all}
gpus=${2:-1,2}
images=${3:-50000}
acc_model=${4:-resnet18}
P=runs/scaling
mkdir -p "$OUT/scaling" "$P"
BIN=/tmp/octet-bin/octet
if [ ! -x "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf "$C/octet.tar.gz" -C /tmp/octet-bin || exit 1
fi
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/scaling/gpu.txt"
nvidia-smi topo -m > "$OUT/scaling/topology.txt" 2>&1
quick=""; [ "$images" = 10000 ] && quick="--quick"
peers=()
for g in ${gpus//,/ }; do
  if [ "$stage" != octet ] || [ ! -f "$P/peer_torch_${g}gpu.json" ]; then
    PYTHONUNBUFFERED=1 torchrun --standalone --nproc_per_node "$g" "$C/peer_torch.py" --ddp $quick \
      --out "$P" || echo "peer on $g GPUs failed"
    if [ "$g" -gt 1 ]; then
      (cd "$P" && torchrun --standalone --nproc_per_node "$g" "$OLDPWD/$C/peer_allreduce.py" \
        && mv "allreduce_${g}gpu.json" "peer_allreduce_${g}gpu.json")
    fi
  fi
  peers+=(--peer "$P/peer_torch_${g}gpu.json")
done
cp "$P"/peer_*.json "$OUT/scaling/" 2>/dev/null
[ "$stage" = peers ] && { tar czf "$OUT/peers.tar.gz" -C "$P" .; exit 0; }
"$BIN" bench scaling --gpus "$gpus" --images "$images" "${peers[@]}" \
  --accuracy-data "fashion-mnist:$C/fashion-mnist" --accuracy-model "$acc_model" \
  --out "$OUT/scaling"
rm -rf "$OUT/scaling/runs"/*/last.safetensors
tar czf "$OUT/scaling.tar.gz" -C "$OUT" scaling && rm -rf "$OUT/scaling"
