#!/usr/bin/env bash
# The --precision bf16 checks on the GPU machine, in one command (results under $OUT):
#
#   bash bench/gpu_bf16.sh tests     # GPU tests: channels-last ops vs candle's f32 reference,
#                                    # the NCHW ops (regression), the bf16 vs f32 loss curves
#   bash bench/gpu_bf16.sh quick     # ResNet-18 f32 and bf16 at b128/b512, octet only
#   bash bench/gpu_bf16.sh profile   # ncu kernel times of ResNet-18 bf16 b512 steps
#
# Expects in the ignored folder .carry/: octet.tar.gz (release binary, --features nccl) and
# tests.tar.gz (stripped test binaries channels_last_gpu, ops_gpu, bf16_gpu).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_CACHE_MAXSIZE=4294967296 OCTET_DATA_DIR=$PWD/data
OUT=${OUT:-bench/out}
mkdir -p "$OUT" /tmp/octet-bin /tmp/octet-tests
[ -x /tmp/octet-bin/octet ] || tar xzf .carry/octet.tar.gz -C /tmp/octet-bin || exit 1
BIN=/tmp/octet-bin/octet
for stage in "$@"; do
  case "$stage" in
    tests)
      tar xzf .carry/tests.tar.gz -C /tmp/octet-tests || exit 1
      for t in channels_last_gpu ops_gpu bf16_gpu; do
        echo "== $t"
        timeout 150 /tmp/octet-tests/$t --test-threads=1 --nocapture > "$OUT/$t.txt" 2>&1
        echo "exit $?"; grep -E "^test |panicked|off by|test result|loss bf16|logits|worst" "$OUT/$t.txt" | head -40
      done
      ;;
    quick)
      timeout 300 "$BIN" bench train --models resnet18 --precision f32,bf16 --batch-sizes 128,512 \
        --images 50000 --device cuda --out "$OUT/quick.json" 2>&1 | tee "$OUT/quick.txt"
      ;;
    profile)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      timeout 240 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
        --launch-skip 4000 --launch-count 1500 "$BIN" bench train --models resnet18 --precision bf16 \
        --batch-sizes 512 --images 8192 --device cuda > "$OUT/ncu_bf16_b512.csv" 2> "$OUT/ncu.err"
      echo "ncu exit $?"; tail -3 "$OUT/ncu.err"
      python3 - "$OUT/ncu_bf16_b512.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
k, v = head.index("Kernel Name"), head.index("Metric Value")
t = collections.Counter()
for r in rows:
    t[r[k][:90]] += float(r[v].replace(",", ""))
total = sum(t.values())
print(f"{len(rows)} kernels, {total/1e6:.2f} ms")
for name, ns in t.most_common(25):
    print(f"{100*ns/total:5.1f}%  {ns/1e6:8.3f} ms  {name}")
PY
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
