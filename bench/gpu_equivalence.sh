#!/usr/bin/env bash
# Data-parallel equivalence on a 2-GPU machine: ResNet-18, same seed, full-f32 convolutions,
# 2 GPUs × batch 64 with --bn sync (and, for contrast, --bn local) against 1 GPU × batch 128.
# With sync batch norm the two runs compute the same function of the same global batches, so
# their loss curves differ only by rounding (amplified by SGD; see trainer/tests/data_parallel.rs).
#
#   bash bench/gpu_equivalence.sh [EPOCHS]     # default 5, on the bundled Fashion-MNIST subset
#
# Expects .carry/octet.tar.gz (release binary built with --features nccl). Writes
# $OUT/equivalence.json (per-epoch train loss and test accuracy of each run, relative gaps).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OCTET_DATA_DIR=$PWD/data
OUT=${OUT:-bench/out}
BIN=/tmp/octet-bin/octet
if [ ! -x "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf .carry/octet.tar.gz -C /tmp/octet-bin || exit 1
fi
epochs=${1:-5}
R=/tmp/equivalence
rm -rf "$R"
common=(--model resnet18 --data bundled --epochs "$epochs" --seed 7 --no-augment --lr 0.05
        --device cuda --no-tf32 --json)
"$BIN" train "${common[@]}" --batch-size 128 --out "$R/one" > "$R.one.log" 2>&1 || exit 1
"$BIN" launch --gpus 2 -- train "${common[@]}" --batch-size 64 --bn sync --out "$R/sync" \
  > "$R.sync.log" 2>&1 || exit 1
"$BIN" launch --gpus 2 -- train "${common[@]}" --batch-size 64 --bn local --out "$R/local" \
  > "$R.local.log" 2>&1 || exit 1
python3 - "$R" "$OUT/equivalence.json" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'PY'
import csv, json, sys
root, out, gpu = sys.argv[1:4]
def curve(name):
    with open(f"{root}/{name}/metrics.csv") as f:
        return [dict(epoch=int(r["epoch"]), train_loss=float(r["train_loss"]),
                     test_accuracy=float(r["test_accuracy"])) for r in csv.DictReader(f)]
one, sync, local = curve("one"), curve("sync"), curve("local")
gap = lambda a, b: [round(abs(x["train_loss"] - y["train_loss"]) / y["train_loss"], 5) for x, y in zip(a, b)]
res = dict(gpu=gpu, command="bash bench/gpu_equivalence.sh",
           setup="ResNet-18, bundled Fashion-MNIST subset (6,000 train / 2,000 test), seed 7, lr 0.05 "
                 "cosine, no augmentation, --no-tf32; one = 1 GPU x 128; sync/local = 2 GPUs x 64",
           one=one, sync=sync, local=local,
           rel_loss_gap_sync=gap(sync, one), rel_loss_gap_local=gap(local, one))
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({k: res[k] for k in ("rel_loss_gap_sync", "rel_loss_gap_local")}))
for a, b, c in zip(one, sync, local):
    print(a["epoch"], a["train_loss"], b["train_loss"], c["train_loss"], a["test_accuracy"], b["test_accuracy"], c["test_accuracy"])
PY
