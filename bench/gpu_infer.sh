#!/usr/bin/env bash
# Inference benchmark in one command on one GPU: the PyTorch peer (shared/peers/
# peer_torch_infer.py: fp32 and bf16 + channels_last) and `octet bench infer` (int8 runtime on
# CPU and CUDA, candle f32 on CPU and CUDA), then the CUDA int8 bit-exactness tests.
#
#   bash bench/gpu_infer.sh
#
# Expects, in the ignored folder .carry/: octet.tar.gz (release binary built with
# --features cuda), peer_torch.py and peer_torch_infer.py, and optionally cuda_tests.tar.gz
# (the runtime's `cuda` test binary). Writes $OUT/infer.tar.gz and $OUT/log.txt.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-bench/out}
C=.carry
mkdir -p "$OUT/infer"
BIN=/tmp/octet-bin/octet
if [ ! -x "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf "$C/octet.tar.gz" -C /tmp/octet-bin || exit 1
fi
exec > >(tee -a "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/infer/gpu.txt"
peer_json=$(realpath -m "$OUT/infer/peer_infer.json")
(cd "$C" && PYTHONUNBUFFERED=1 python3 peer_torch_infer.py --json "$peer_json")
"$BIN" bench infer --device cuda --peer "$peer_json" --out "$OUT/infer"
if [ -f "$C/cuda_tests.tar.gz" ]; then
  mkdir -p /tmp/ct && tar xzf "$C/cuda_tests.tar.gz" -C /tmp/ct
  for t in /tmp/ct/*; do "$t" --test-threads 1 2>&1 | tail -25; done | tee "$OUT/infer/cuda_tests.txt"
fi
tar czf "$OUT/infer.tar.gz" -C "$OUT" infer && rm -rf "$OUT/infer"
