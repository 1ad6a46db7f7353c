#!/usr/bin/env bash
# Moving LeNet and ResNet-18 onto network descriptions, measured: the same training run with
# an octet built before the move (OLD) and with this one (NEW) — same seed, data and flags, on
# the CPU — gives the same checkpoint tensors, bit for bit, the same `.o8` bytes and the same
# `.tflite` bytes (bar tensor names); the epoch times are beside them. Writes $OUT (default
# bench/results/zoo_ab.json) with the machine, both commits and the command.
#
#   bash bench/zoo_ab.sh OLD_OCTET NEW_OCTET
#
# Environment: OLD_COMMIT (recorded), RUNS (default "lenet:bundled:1 resnet18:synthetic:256:64:1",
# MODEL:DATA:EPOCHS with DATA as --data takes it).
set -euo pipefail
[ $# -eq 2 ] || { sed -n 8,8p "$0"; exit 2; }
command="$0 $*"
old=$(realpath "$1"); new=$(realpath "$2")
cd "$(dirname "$0")/.."
out=${OUT:-bench/results/zoo_ab.json}
runs=${RUNS:-lenet:bundled:1 resnet18:synthetic:256:64:1}
work=target/zoo_ab
rm -rf "$work"; mkdir -p "$work"
names=()
for run in $runs; do
  model=${run%%:*}; rest=${run#*:}
  epochs=${rest##*:}; data=${rest%:*}
  for v in old new; do
    b=$new; [ $v = old ] && b=$old
    dir="$work/${model}_$v"
    "$b" train --model "$model" --data "$data" --epochs "$epochs" --seed 0 --no-plots \
      --out "$dir" --json >"$dir.train.json"
    "$b" export "$dir/last.safetensors" -o "$dir.o8" --calibration-images 64 \
      --test-images 50 --no-plots >/dev/null
    "$b" convert "$dir.o8" -o "$dir.tflite" >/dev/null
  done
  names+=("$model")
done
python3 - "$out" "$work" "OLD_COMMIT=${OLD_COMMIT:-} $command" "${names[@]}" <<'PY'
import json, os, platform, struct, subprocess, sys
out, work, command, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}
def epochs(path):
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]
models = {}
for m in names:
    a, b = (f"{work}/{m}_{v}" for v in ("old", "new"))
    ta, tb = tensors(f"{a}/last.safetensors"), tensors(f"{b}/last.safetensors")
    same = [k for k in ta if tb.get(k) == ta[k]]
    oa, ob = open(f"{a}.o8", "rb").read(), open(f"{b}.o8", "rb").read()
    fa, fb = open(f"{a}.tflite", "rb").read(), open(f"{b}.tflite", "rb").read()
    ea, eb = epochs(f"{a}.train.json"), epochs(f"{b}.train.json")
    models[m] = {
        "checkpoint_tensors": len(ta),
        "identical_tensors": len(same),
        "same_tensor_names": sorted(ta) == sorted(tb),
        "o8_identical": oa == ob, "o8_bytes": len(ob),
        "tflite_identical": fa == fb, "tflite_bytes": {"old": len(fa), "new": len(fb)},
        "epoch_seconds": {"old": [e["times"]["train_s"] for e in ea if e.get("event") == "epoch"], "new": [e["times"]["train_s"] for e in eb if e.get("event") == "epoch"]},
        "test_accuracy": {"old": [e["test_accuracy"] for e in ea if e.get("event") == "epoch"], "new": [e["test_accuracy"] for e in eb if e.get("event") == "epoch"]},
    }
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
flags = sorted({f for l in open("/proc/cpuinfo") if l.startswith("flags") for f in l.split()[2:]} & {"avx2", "avx512_vnni", "avx_vnni", "amx_int8"})
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
result = {
    "what": "LeNet and ResNet-18 before and after moving onto network descriptions: same seed, data and flags on the CPU; checkpoint tensors, .o8 and .tflite bytes compared, epoch times beside",
    "machine": {"cpu": cpu, "features": flags, "cores": os.cpu_count(), "system": platform.platform()},
    "commit": commit, "old_commit": os.environ.get("OLD_COMMIT", "unknown"),
    "command": command, "models": models,
}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
os.replace(tmp, out)
for m, r in models.items():
    print(f"{m}: {r['identical_tensors']}/{r['checkpoint_tensors']} tensors identical, .o8 identical: {r['o8_identical']}, "
          f".tflite identical: {r['tflite_identical']}, epoch s old {r['epoch_seconds']['old']} new {r['epoch_seconds']['new']}")
PY
