#!/usr/bin/env bash
# The multi-GPU scaling report in one command on an N-GPU machine: the PyTorch DDP peer
# (torchrun shared/peers/peer_torch.py --ddp, and peer_allreduce.py) for each GPU count, then
# `octet bench scaling` with the peer's epoch times beside octet's, ResNet-18 at every batch
# size per GPU and precision.
#
#   bash bench/gpu_scaling.sh [all|peers|octet] [GPUS] [IMAGES] [ACCURACY_MODEL]
#   # defaults: all 1,2 50000 resnet18
#
# Environment:
#   PRECISIONS=f32,bf16  precisions of the timing runs, octet's and the peer's (bf16: octet
#                        --precision bf16; the peer's autocast + channels_last)
#   BATCHES=128,512      batch sizes per GPU
#   ACCURACY=1           0: skip the accuracy runs (small vs large batch, 5 epochs of
#                        Fashion-MNIST on the most GPUs; about 1.5-3 minutes)
#   LIMIT=540            seconds from the start after which `octet bench scaling` is stopped
#                        (SIGTERM), so a call ends within the device's 10 minutes with a report
#                        of what was measured
#
# Stages: `peers` runs only the PyTorch side, `octet` the rest (running the peers first where
# their file is missing). Both keep their results in runs/scaling, which stays on a warm
# machine: octet's sweep runs with --reuse, so a call cut short by LIMIT is finished by running
# the same command again (each call returns the report so far). Rough times with the defaults
# (4 timing runs per GPU count): peers ~1 minute per GPU count (+~20 s of peer_allreduce.py for
# each count > 1); octet ~15-25 s per timing run (2 epochs and start-up, i.e. ~1.5 minutes per
# GPU count) + ~20 s of `bench allreduce` per count > 1 + the accuracy runs. One H100 (GPUS=1):
# `all` in ~3-4 minutes. 1,2,4,8 GPUs: `peers` ~5 minutes, then `octet` ~8-10 minutes (rerun if
# cut short).
#
# Expects, in the ignored folder .carry/: octet.tar.gz (release binary built with
# --features nccl), peer_torch.py and peer_allreduce.py (from shared/peers),
# fashion-mnist/*.gz for the accuracy rows. Writes $OUT/scaling.tar.gz (report.md, report.json,
# plots, all-reduce and peer JSON, the runs' metrics) and $OUT/log.txt.
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
precisions=${PRECISIONS:-f32,bf16}
batches=${BATCHES:-128,512}
limit=${LIMIT:-540}
P=runs/scaling
R=$P/octet
mkdir -p "$OUT/scaling" "$R"
BIN=/tmp/octet-bin/octet
if [ ! -x "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf "$C/octet.tar.gz" -C /tmp/octet-bin || exit 1
fi
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/scaling/gpu.txt"
nvidia-smi topo -m > "$OUT/scaling/topology.txt" 2>&1
quick=""; [ "$images" = 10000 ] && quick="--quick"
configs=""
for p in ${precisions//,/ }; do
  for b in ${batches//,/ }; do configs+="${configs:+,}resnet18:$b:$p"; done
done
peers=()
for g in ${gpus//,/ }; do
  if [ "$stage" != octet ] || [ ! -f "$P/peer_torch_${g}gpu.json" ]; then
    echo "== peer on $g GPU(s): $configs ($SECONDS s)"
    PYTHONUNBUFFERED=1 torchrun --standalone --nproc_per_node "$g" "$C/peer_torch.py" --ddp $quick \
      --configs "$configs" --out "$P" || echo "peer on $g GPUs failed"
    if [ "$g" -gt 1 ]; then
      (cd "$P" && torchrun --standalone --nproc_per_node "$g" "$OLDPWD/$C/peer_allreduce.py" \
        && mv "allreduce_${g}gpu.json" "peer_allreduce_${g}gpu.json")
    fi
  fi
  # A failed peer leaves its column empty rather than stopping octet's runs.
  [ -f "$P/peer_torch_${g}gpu.json" ] && peers+=(--peer "$P/peer_torch_${g}gpu.json")
done
cp "$P"/peer_*.json "$OUT/scaling/" 2>/dev/null
[ "$stage" = peers ] && { tar czf "$OUT/peers.tar.gz" -C "$P" --exclude octet .; exit 0; }
accuracy=()
[ "${ACCURACY:-1}" != 0 ] && accuracy=(--accuracy-data "fashion-mnist:$C/fashion-mnist" --accuracy-model "$acc_model")
left=$((limit - SECONDS))
echo "== octet bench scaling ($SECONDS s; stopped after $left s)"
if [ "$left" -gt 30 ]; then
  timeout "$left" "$BIN" bench scaling --gpus "$gpus" --images "$images" --batch-sizes "$batches" \
    --precisions "$precisions" "${peers[@]}" "${accuracy[@]}" --reuse --out "$R"
  rc=$?
else
  rc=124
fi
if [ "$rc" = 124 ]; then
  echo "== cut short at $limit s: run the same command again on this machine to measure the rest"
  [ -f "$R/report.json" ] && "$BIN" bench scaling --render "$R/report.json" --out "$R" > /dev/null
fi
rm -f "$R"/runs/*/last.safetensors
cp -r "$R"/. "$OUT/scaling/"
tar czf "$OUT/scaling.tar.gz" -C "$OUT" scaling && rm -rf "$OUT/scaling"
echo "== done ($SECONDS s)"
