#!/usr/bin/env bash
# Data-parallel correctness and faults on 2 GPUs, in one command on the GPU machine:
#   1. equivalence: LeNet (no batch norm), same seed, no augmentation, full Fashion-MNIST:
#      2 GPUs × batch 64 against 1 GPU × batch 128, 3 epochs, loss curves side by side;
#   2. a rank killed (SIGKILL) in epoch 2, ranks started by hand with RANK/WORLD_SIZE as
#      torchrun or Slurm would: the surviving rank must end with the watchdog's error within
#      --dist-timeout, and the epoch-1 checkpoint must be byte-identical afterwards;
#   3. the same under `octet launch`: the launcher stops the other rank, reports which rank
#      failed and propagates its exit code;
#   4. --resume of that checkpoint on 1 GPU;
#   5. a rank killed under `octet launch --max-restarts 1`: the launcher stops the job and
#      starts it again once, the ranks resume from the epoch-1 checkpoint and the job ends with
#      exit 0 after 3 epochs in all.
# Writes $OUT/faults/dp_faults.json (5. as restart_under_launch) and $OUT/faults/log.txt.
#
#   bash bench/gpu_faults.sh            # all five, on 2 GPUs
#   bash bench/gpu_faults.sh restart1   # only 5, on ONE GPU (--gpus 1, the only rank killed):
#                                       # $OUT/faults/restart_1gpu.json
# Expects .carry/octet.tar.gz (built with --features nccl) and .carry/fashion-mnist/*.gz.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 CUDA_CACHE_MAXSIZE=4294967296
OUT=${OUT:-bench/out}
C=.carry
mode=${1:-all}
case "$mode" in all | restart1) ;; *) echo "usage: bash bench/gpu_faults.sh [restart1]"; exit 2 ;; esac
mkdir -p "$OUT/faults"
F=$OUT/faults
BIN=/tmp/octet-bin/octet
# A warm machine may still hold the binary of an earlier call: take the one in .carry.
if [ ! -x "$BIN" ] || [ "$C/octet.tar.gz" -nt "$BIN" ]; then
  mkdir -p /tmp/octet-bin && tar xzf "$C/octet.tar.gz" -C /tmp/octet-bin || exit 1
fi
exec > >(tee -a "$F/log.txt") 2>&1
DATA="fashion-mnist:$C/fashion-mnist"
common=(--model lenet --data "$DATA" --device cuda --no-augment --seed 7 --epochs 3 --json)

# A hang is the failure this script looks for: wait at most $2 seconds for pid $1, then
# record where its threads sit (for the report) and kill it, so one hang cannot eat the run.
wait_bounded() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null && [ "$t" -lt $((limit * 5)) ]; do sleep 0.2; t=$((t + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "HANG: pid $pid still running after ${limit} s; thread states:"
    for d in /proc/$pid/task/*; do
      echo "  $(cat $d/comm) state=$(awk '{print $3}' $d/stat) wchan=$(cat $d/wchan 2>/dev/null)"
    done
    command -v gdb >/dev/null && timeout 30 gdb -p "$pid" -batch -ex "thread apply all bt 8" 2>/dev/null | grep -E "^Thread|^#" | head -60
    kill -9 "$pid"; wait "$pid"; return 124
  fi
  wait "$pid"
}

# $1 and every process below it (ranks run in their own process groups).
tree() {
  local c
  for c in $(pgrep -P "$1"); do tree "$c"; done
  echo "$1"
}

# Nothing this script started outlives it: its unfinished background jobs (launchers, ranks
# started by hand) and what they started get SIGTERM (a launcher stops its ranks), then SIGKILL.
cleanup() {
  local p all=()
  for p in $(jobs -p); do
    [ "$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')" = "$$" ] || continue
    mapfile -t -O "${#all[@]}" all < <(tree "$p")
  done
  [ "${#all[@]}" = 0 ] && return
  echo "stopping what is left: ${all[*]}"
  kill -TERM "${all[@]}" 2>/dev/null
  sleep 3
  kill -KILL "${all[@]}" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The pid of rank $2 among the children of launcher $1 (from the RANK its environment holds).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return; }
  done
}

machine() {
  nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | awk '{$1=$1" x"; print}' | paste -sd,
}

# 5. `octet launch --gpus $1 --max-restarts 1`, LeNet b32, the last rank SIGKILLed early in
# epoch 2 (after epoch 1's checkpoint): expect exit 0, "restart 1 of 1" from the launcher,
# "resuming from … (after epoch 1)" from the restarted rank 0 and 3 epoch lines on stdout in all (1
# before the kill, 2 after). Result in $F/restart_$1gpu.json.
restart_run() {
  local g=$1 d=/tmp/restart t=0 lp victim before rc t0 t1
  local jsonl=$F/restart_${g}gpu.jsonl err=$F/restart_${g}gpu.err
  rm -rf "$d" && mkdir -p "$d"
  local cmd=("$BIN" launch --gpus "$g" --max-restarts 1 -- train "${common[@]}" --batch-size 32 --out "$d")
  echo "${cmd[*]}"
  "${cmd[@]}" >"$jsonl" 2>"$err" &
  lp=$!
  # metrics.csv is written after last.safetensors: both there means epoch 1's checkpoint is.
  # Bounded (5 minutes), and over if the launcher ends first.
  while { [ ! -f "$d/metrics.csv" ] || [ ! -f "$d/last.safetensors" ]; } &&
    kill -0 "$lp" 2>/dev/null && [ "$t" -lt 6000 ]; do
    sleep 0.05
    t=$((t + 1))
  done
  sleep 0.2 # into epoch 2 (a LeNet epoch takes seconds), well before its end
  victim=$(rank_pid "$lp" $((g - 1)))
  before=$(grep -cE '"event": ?"epoch"' "$jsonl")
  if [ -n "$victim" ]; then
    kill -9 "$victim"
    echo "killed rank $((g - 1)) (pid $victim) after $before epoch(s)"
  else
    echo "no rank $((g - 1)) to kill (launcher running: $(kill -0 "$lp" 2>/dev/null && echo yes || echo no))"
  fi
  t0=$(date +%s.%N)
  wait_bounded "$lp" 300
  rc=$?
  t1=$(date +%s.%N)
  echo "launch exit $rc $(python3 -c "print(round($t1 - $t0, 1))") s after the kill; orphans: $(pgrep -fc 'octet train' || true)"
  grep -e '^octet launch:' -e 'resuming from' "$err" | tail -6
  python3 - "$jsonl" "$err" "$g" "$rc" "$before" "${victim:-}" "$(machine)" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "${cmd[*]}" "$F/restart_${g}gpu.json" <<'PY'
import json, re, sys
jsonl, err, g, rc, before, victim, machine, commit, cmd, out = sys.argv[1:]
epochs = []
for l in open(jsonl):
    try:
        v = json.loads(l)
    except ValueError:
        continue
    if isinstance(v, dict) and v.get("event") == "epoch":
        epochs.append(v)
lines = open(err, errors="replace").read().splitlines()
restart = next((l.strip() for l in lines if "restart 1 of 1" in l), None)
resumed = [int(m.group(1)) for m in (re.search(r"resuming from .* \(after epoch (\d+)\)", l) for l in lines) if m]
res = {
    "machine": machine, "commit": commit, "gpus": int(g), "command": cmd,
    "killed": f"rank {int(g) - 1} (SIGKILL), early in epoch 2" if victim else "nothing: no rank found",
    "epochs_before_kill": int(before),
    "exit": int(rc), "restart_line": restart,
    "resumed_after_epoch": resumed[0] if resumed else None,
    "epoch_lines": len(epochs), "epochs": [e.get("epoch") for e in epochs],
    "final_test_accuracy": epochs[-1].get("test_accuracy") if epochs else None,
    "launcher_lines": [l for l in lines if l.startswith("octet launch:")][-6:],
    "stderr_tail": [l for l in lines if l.strip()][-4:],
}
res["pass"] = (res["exit"] == 0 and restart is not None and res["resumed_after_epoch"] == 1
               and len(epochs) == 3 and res["epochs"][-1] == 3)
json.dump(res, open(out, "w"), indent=1)
print(f"restart under launch on {g} GPU(s): exit {rc}, restart line {'yes' if restart else 'NO'}, "
      f"resumed after epoch {res['resumed_after_epoch']}, epochs {res['epochs']}, "
      f"final test accuracy {res['final_test_accuracy']}: {'PASS' if res['pass'] else 'FAIL'}")
PY
}

if [ "$mode" = restart1 ]; then
  echo "== 5. the only rank killed under octet launch --gpus 1 --max-restarts 1"
  restart_run 1
  echo "wrote $F/restart_1gpu.json"
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["pass"] else 1)' "$F/restart_1gpu.json"
  exit
fi

echo "== 1. equivalence"
"$BIN" train "${common[@]}" --batch-size 128 --out /tmp/eq1 > "$F/eq_1gpu.jsonl"
"$BIN" launch --gpus 2 -- train "${common[@]}" --batch-size 64 --out /tmp/eq2 > "$F/eq_2gpu.jsonl"
python3 - "$F/eq_1gpu.jsonl" "$F/eq_2gpu.jsonl" <<'PY'
import json, sys
rows = [[json.loads(l) for l in open(p) if '"epoch"' in l and l.startswith("{")] for p in sys.argv[1:]]
for a, b in zip(*rows):
    print(f"epoch {a['epoch']}: 1 GPU x128 loss {a['train_loss']:.6f} test {a['test_accuracy']:.4f} | "
          f"2 GPU x64 loss {b['train_loss']:.6f} test {b['test_accuracy']:.4f} | "
          f"rel diff {abs(a['train_loss']-b['train_loss'])/a['train_loss']:.2e}")
PY

echo "== 2. rank 1 killed in epoch 2, ranks started by hand"
rm -rf /tmp/kill && mkdir -p /tmp/kill
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
    "$BIN" train "${common[@]}" --batch-size 32 --dist-timeout 20 --out /tmp/kill \
    > "$F/kill_rank$r.jsonl" 2> "$F/kill_rank$r.err" &
  eval "pid$r=$!"
done
until [ -f /tmp/kill/metrics.csv ]; do sleep 0.05; done
# Kill early in epoch 2 (a LeNet epoch takes ~1.6 s here); the checkpoint is epoch 1's.
sleep 0.2; sha_before=$(sha256sum /tmp/kill/last.safetensors | cut -c1-16)
kill -9 "$pid1"; t0=$(date +%s.%N)
echo "epochs finished by rank 0 before the kill: $(grep -c '"epoch"' "$F/kill_rank0.jsonl")"
wait_bounded "$pid0" 60; rc0=$?; t1=$(date +%s.%N)
sha_after=$(sha256sum /tmp/kill/last.safetensors | cut -c1-16)
echo "rank 0 exit $rc0 after $(python3 -c "print(round($t1-$t0,1))") s; checkpoint $sha_before -> $sha_after"
tail -2 "$F/kill_rank0.err"

echo "== 3. the same under octet launch"
rm -rf /tmp/kill2 && mkdir -p /tmp/kill2
"$BIN" launch --gpus 2 -- train "${common[@]}" --batch-size 32 --out /tmp/kill2 > "$F/launch.jsonl" 2> "$F/launch.err" &
lp=$!
until [ -f /tmp/kill2/metrics.csv ]; do sleep 0.2; done
sleep 1; victim=$(pgrep -f "octet train" | while read p; do grep -q "RANK=1" /proc/$p/environ 2>/dev/null && tr '\0' '\n' < /proc/$p/environ | grep -qx "RANK=1" && echo $p; done | head -1)
t0=$(date +%s.%N); kill -9 "$victim"; wait_bounded "$lp" 60; rc=$?; t1=$(date +%s.%N)
echo "launch exit $rc after $(python3 -c "print(round($t1-$t0,1))") s; orphans: $(pgrep -fc 'octet train' || true)"
tail -3 "$F/launch.err"

echo "== 4. resume the 2-GPU checkpoint on 1 GPU"
"$BIN" train --resume /tmp/kill/last.safetensors --device cuda --json > "$F/resume.jsonl"; echo "resume exit $?"
grep -c '"epoch"' "$F/resume.jsonl"
tail -1 "$F/resume.jsonl"

echo "== 5. rank 1 killed under octet launch --max-restarts 1"
restart_run 2

sleep 1  # let tee flush the log the summary is read from
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | awk '{$1=$1" x"; print}' | paste -sd,)
python3 - "$F" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$gpus" "$F/log.txt" <<'PY'
import json, sys
d, commit, machine, log = sys.argv[1:5]
rows = [[json.loads(l) for l in open(f"{d}/{n}") if l.startswith("{") and '"epoch"' in l and '"train_loss"' in l] for n in ("eq_1gpu.jsonl", "eq_2gpu.jsonl")]
eq = [dict(epoch=a["epoch"], loss_1gpu_b128=a["train_loss"], loss_2gpu_b64=b["train_loss"],
           rel_diff=abs(a["train_loss"]-b["train_loss"])/a["train_loss"], test_1gpu=a["test_accuracy"], test_2gpu=b["test_accuracy"]) for a, b in zip(*rows)]
L = open(log).read().splitlines()
def after(tag, n):
    i = next(i for i, l in enumerate(L) if l.startswith(tag)); return L[i+1:i+1+n]
k = [l for l in after("== 2.", 8) if l.startswith(("rank 0 exit", "error:", "HANG"))]
killed_after = [int(l.split()[-1]) for l in after("== 2.", 8) if l.startswith("epochs finished")]
la = [l for l in after("== 3.", 6) if l.startswith(("launch exit", "octet launch: rank", "octet launch: exiting", "HANG"))]
r = after("== 4.", 3)
out = {"machine": machine, "command": "bash bench/gpu_faults.sh", "commit_note": f"tree of commit {commit}",
       "equivalence": {"setup": "LeNet, full Fashion-MNIST, seed 7, no augmentation, 3 epochs; TF32 convolutions on (default). Loose check; the rigorous one is dp_equivalence_h200x2.json", "rows": eq},
       "rank_killed_by_hand": {"result": k[0], "rank0_stderr": k[1:], "epochs_finished_before_kill": killed_after[0] if killed_after else None},
       "rank_killed_under_launch": la,
       "resume_on_1_gpu": {"exit": int(r[0].split()[-1]), "epochs_after_resume": int(r[1]), "last": r[2]}}
try:
    out["restart_under_launch"] = json.load(open(f"{d}/restart_2gpu.json"))
except (OSError, ValueError) as e:
    out["restart_under_launch"] = {"error": f"no result: {e}"}
json.dump(out, open(f"{d}/dp_faults.json", "w"), indent=1)
PY
echo "wrote $F/dp_faults.json (commit it as bench/results/dp_faults_<gpu>.json)"
