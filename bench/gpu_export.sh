#!/usr/bin/env bash
# `octet export --device cuda` and `octet run --device cuda|cpu` on the GPU machine, timed, on
# the whole Fashion-MNIST test split, with the CPU export of the same checkpoint and flags
# beside them: are the .o8 files byte-identical (and if not, which bytes differ), are the
# predictions of `run` on both devices identical.
#
#   bash bench/gpu_export.sh [CHECKPOINT]     # default .carry/resnet.safetensors
#
# Without that file, a ResNet-18 is first trained for OCTET_EPOCHS (default 2) epochs on the GPU
# (not timed with the rest) and exported.
#
# Expects, in the ignored folder .carry/: octet.tar.gz (a stripped release binary built with
# --features cuda, `octet` inside) and fashion-mnist/ (the four idx .gz files; or set
# OCTET_FASHION_MNIST). Writes $OUT/gpu_export.json (wall seconds of each command, the
# exports' phase timings and ablations, run's JSON, the .o8 comparison) and $OUT/gpu_export/
# (logs, reports). Set OCTET_CPU_EXPORT=0 to skip the (slower) CPU export.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-bench/out}
C=.carry
CK=${1:-$C/resnet.safetensors}
DATA="fashion-mnist:${OCTET_FASHION_MNIST:-$C/fashion-mnist}"
W="$OUT/gpu_export"
BIN=/tmp/octet-bin/octet
[ -x "$BIN" ] || { mkdir -p "${BIN%/*}" && tar xzf "$C/octet.tar.gz" -C "${BIN%/*}"; } || exit 1
mkdir -p "$W"
exec > >(tee -a "$W/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
nproc > "$W/cpus.txt"

# Runs "$@" with its stdout into $W/$1.json and its stderr into $W/$1.log; the wall seconds
# into $W/$1.secs.
timed() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN" "$@" > "$W/$name.json" 2> "$W/$name.log"
  echo "exit $? $name"
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)" > "$W/$name.secs"
}

if [ ! -f "$CK" ]; then
  "$BIN" train --model resnet18 --data "$DATA" --epochs "${OCTET_EPOCHS:-2}" --device cuda \
    --out "$W/train" > "$W/train.log" 2>&1 || { echo "training failed"; tail "$W/train.log"; exit 1; }
  CK="$W/train/last.safetensors"
fi

# The whole test split (--test-images 0), default flags otherwise.
E=(--data "$DATA" --test-images 0 --no-plots --json)
timed export_cuda export "$CK" -o "$W/cuda.o8" --report "$W/cuda.report" --device cuda "${E[@]}"
if [ "${OCTET_CPU_EXPORT:-1}" != 0 ]; then
  timed export_cpu export "$CK" -o "$W/cpu.o8" --report "$W/cpu.report" --device cpu "${E[@]}"
fi
O8="$W/cpu.o8"; [ -f "$O8" ] || O8="$W/cuda.o8"
R=(--data "$DATA" --json)
timed run_cuda run "$O8" --device cuda --predictions "$W/pred_cuda.txt" "${R[@]}"
timed run_cpu run "$O8" --device cpu --predictions "$W/pred_cpu.txt" "${R[@]}"

python3 - "$W" "$OUT/gpu_export.json" <<'PY'
import hashlib, json, os, sys
w, out = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(w, name + ".json")
    try:
        with open(p) as f:
            v = json.load(f)
    except Exception as e:
        v = {"error": str(e), "log_tail": open(os.path.join(w, name + ".log")).read()[-2000:] if os.path.exists(os.path.join(w, name + ".log")) else ""}
    s = os.path.join(w, name + ".secs")
    v_secs = float(open(s).read()) if os.path.exists(s) else None
    return {"wall_seconds": v_secs, "output": v}
def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.exists(p) else None
res = {"gpu": open(os.path.join(w, "gpu.txt")).read().strip(),
       "cpus": int(open(os.path.join(w, "cpus.txt")).read())}
for n in ["export_cuda", "export_cpu", "run_cuda", "run_cpu"]:
    if os.path.exists(os.path.join(w, n + ".secs")):
        r = load(n)
        o = r["output"]
        if n.startswith("export") and "report" in o:
            # Keep what the comparison needs, not the per-layer tables.
            r["output"] = {k: o.get(k) for k in ["o8_bytes", "seconds", "device", "phases", "ablation"]}
            r["layers"] = [{k: l[k] for k in ["name", "observed", "clip", "scale", "zero_point"]} for l in o["report"]["layers"]]
        res[n] = r
cu, cp = os.path.join(w, "cuda.o8"), os.path.join(w, "cpu.o8")
cmp = {"sha256_cuda": sha(cu), "sha256_cpu": sha(cp)}
if os.path.exists(cu) and os.path.exists(cp):
    a, b = open(cu, "rb").read(), open(cp, "rb").read()
    diff = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
    cmp.update({"identical": a == b, "sizes": [len(a), len(b)], "differing_bytes": len(diff),
                "first_differing_offsets": diff[:50]})
    if "layers" in res.get("export_cuda", {}) and "layers" in res.get("export_cpu", {}):
        cmp["layers_that_differ"] = [
            {"name": x["name"], "cuda": {k: x[k] for k in ["observed", "clip", "scale", "zero_point"]},
             "cpu": {k: y[k] for k in ["observed", "clip", "scale", "zero_point"]}}
            for x, y in zip(res["export_cuda"]["layers"], res["export_cpu"]["layers"]) if x != y]
res["o8"] = cmp
pc, pp = os.path.join(w, "pred_cuda.txt"), os.path.join(w, "pred_cpu.txt")
if os.path.exists(pc) and os.path.exists(pp):
    res["predictions_identical"] = open(pc).read() == open(pp).read()
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k not in ("export_cuda", "export_cpu")}, indent=1)[:4000])
for n in ["export_cuda", "export_cpu", "run_cuda", "run_cpu"]:
    if n in res:
        print(n, "wall", res[n]["wall_seconds"])
PY
