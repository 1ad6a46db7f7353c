#!/usr/bin/env bash
# Two "nodes" on one N-GPU host (N even), with NCCL forced onto its network transport, octet
# against PyTorch DDP under the same variables, in one command on the GPU machine:
#   a. octet: two `octet launch --nnodes 2 --node-rank R --gpus N/2 --master-addr 127.0.0.1`
#      process groups at once, each with its half of the GPUs (CUDA_VISIBLE_DEVICES), training
#      ResNet-18 for 2 epochs (epoch 2 timed, read from node 0's stdout);
#   b. `octet bench allreduce` launched the same way (bus bandwidth on that transport; run once
#      with NCCL_DEBUG=INFO, whose NET/ lines say which transport and interface NCCL chose), and
#      for reference one `octet launch --gpus N` group under the same variables;
#   c. the PyTorch DDP peer: two `torchrun --nnodes 2 --node_rank R --nproc_per_node N/2` groups
#      at once, and one `torchrun --standalone --nproc_per_node N` (peer_allreduce.py likewise);
#   d. $OUT/two_nodes.json and $OUT/two_nodes.md (bench/two_nodes_summary.py).
#
#   bash bench/gpu_two_nodes.sh [STAGES] [BATCHES] [PRECISIONS] [GPUS]
#   # defaults: all 128,512 f32,bf16 and every GPU nvidia-smi lists (or CUDA_VISIBLE_DEVICES
#   # leaves visible). STAGES, comma-separated:
#   #   octet-allreduce  b (both launches), the NCCL transport log
#   #   octet-train      a, for each batch and precision
#   #   octet            octet-allreduce,octet-train
#   #   peers            c (DDP training and all-reduce, two groups and one)
#   #   octet-one        optional, not in `all`: octet training as ONE `octet launch --gpus N`
#   #                    group under the same variables (the control for DDP's standalone row)
#   #   octet-serial     optional: a, with --no-overlap (every bucket after backward; the A/B
#   #                    of the overlap, same binary)
#   #   octet-compress   optional: a, with --grad-compress bf16
#   #   peers-compress   optional: c's two groups with DDP's bf16_compress_hook
#   #                    (bench/peer_ddp_compress.py around peer_torch.py)
#   #   summary          only d
#   #   all              octet,peers
#   # Every stage ends with d over all results so far: they stay in runs/two_nodes (ignored by
#   # git), which survives between calls on a warm machine; `all` starts it afresh.
#
# Each training run is 2 epochs of 50,000 synthetic images (IMAGES=10000 for a quick run; the
# peer then runs --quick, its only other size). Roughly: an octet run is its start-up (on a cold
# machine the first process JITs candle's PTX, ~30 s) plus two epochs, about a minute; a DDP
# group runs every configuration in one torchrun, a few minutes. `all` at 2 batch sizes x 2
# precisions can pass the device tool's 10-minute calls, so run it by stages:
# `bash bench/gpu_two_nodes.sh octet`, then `bash bench/gpu_two_nodes.sh peers` on the same warm
# machine (and e.g. `octet-train 128`, then `octet-train 512`, if one stage is still too long).
# bench/NOTES_multinode.md says how to pack .carry/ and what each figure means.
#
# Environment: PEERS_TRAIN_ONLY (1: the peers stage runs the two-group DDP training only, for
# repeated rounds), IMAGES (50000), RUN_LIMIT (seconds one octet run may take before it counts as
# hung and is killed: 300; DDP runs get RUN_LIMIT per configuration), SIM_HOSTID (1: each group
# gets its own NCCL_HOSTID, so NCCL's topology sees two hosts as on a real cluster; 0: one host),
# NCCL_SOCKET_IFNAME / NCCL_IB_DISABLE / other NCCL_* (passed through as set; unset, NCCL picks).
#
# Expects, in the ignored folder .carry/: octet.tar.gz (the release binary `octet` built with
# --features nccl), peer_torch.py and peer_allreduce.py (from shared/peers). Writes
# $OUT/two_nodes.json, $OUT/two_nodes.md, $OUT/two_nodes_runs.tar.gz (every run's command,
# stdout, stderr, exit codes, NCCL debug logs) and $OUT/two_nodes_log.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The network transport only: no peer-to-peer copies over NVLink/PCIe, no shared memory between
# processes, no NVLink multicast (off on shared hosts in any case).
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One JIT of candle's PTX serves every later process; Python's rows reach the log at once.
export CUDA_CACHE_MAXSIZE=4294967296 PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out}
C=.carry
stage=${1:-all}
batches=${2:-128,512}
precisions=${3:-f32,bf16}
IMAGES=${IMAGES:-50000}
RUN_LIMIT=${RUN_LIMIT:-300}
SIM_HOSTID=${SIM_HOSTID:-1}
GRACE=${GRACE:-60} # once one group has failed, the other gets this long before it counts as hung
R=$PWD/runs/two_nodes
BIN_DIR=${OCTET_BIN_DIR:-/tmp/octet-bin}
BIN=$BIN_DIR/octet

stages=
for s in ${stage//,/ }; do
  case $s in
    all) stages+=,octet-allreduce,octet-train,peers && rm -rf "$R" ;; # afresh: no stale rows
    octet) stages+=,octet-allreduce,octet-train ;;
    octet-allreduce | octet-train | octet-one | octet-serial | octet-compress | peers | peers-compress | summary) stages+=,$s ;;
    *) echo "unknown stage '$s' (all, octet, octet-allreduce, octet-train, octet-one, octet-serial, octet-compress, peers, peers-compress, summary)"; exit 2 ;;
  esac
done
want() { case "$stages," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$OUT" "$R"
exec > >(tee -a "$OUT/two_nodes_log.txt") 2>&1
echo "== $(date -u +%FT%TZ) bash bench/gpu_two_nodes.sh $* (stages ${stages#,})"

# The GPUs: CUDA_VISIBLE_DEVICES's list if set, else every one nvidia-smi lists; the first N.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -ra devs <<<"$CUDA_VISIBLE_DEVICES"
else
  mapfile -t devs < <(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ')
fi
gpus=${4:-${#devs[@]}}
if ! [ "$gpus" -ge 2 ] 2>/dev/null || [ $((gpus % 2)) != 0 ] || [ "$gpus" -gt "${#devs[@]}" ]; then
  echo "need an even number of GPUs, at least 2 and at most the ${#devs[@]} visible: got '$gpus'"
  exit 2
fi
half=$((gpus / 2))
join() { local IFS=,; echo "$*"; }
ALL=$(join "${devs[@]:0:gpus}")
HALF=("$(join "${devs[@]:0:half}")" "$(join "${devs[@]:half:half}")")
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader >"$R/gpu.txt" 2>&1
nvidia-smi topo -m >"$R/topology.txt" 2>&1
echo "GPUs $ALL: node 0 gets ${HALF[0]}, node 1 ${HALF[1]}; NCCL: $(env | grep '^NCCL_' | sort | paste -sd' ')"

if want octet-allreduce || want octet-train || want octet-one || want octet-serial || want octet-compress; then
  mkdir -p "$BIN_DIR" && tar xzf "$C/octet.tar.gz" -C "$BIN_DIR" || exit 1
fi

# --- process groups, bounded --------------------------------------------------------------
LIVE=() # groups started and not yet waited for: what the EXIT trap stops

# $1 and every process below it (ranks run in their own process groups, so a group kill of the
# launcher would miss them; a walk of the parent links does not).
tree() {
  local c
  for c in $(pgrep -P "$1"); do tree "$c"; done
  echo "$1"
}

kill_trees() { # SIGNAL PID...: the trees of the PIDs, taken before any is signalled
  local sig=$1 p all=()
  shift
  for p in "$@"; do mapfile -t -O "${#all[@]}" all < <(tree "$p"); done
  [ "${#all[@]}" -gt 0 ] && kill "-$sig" "${all[@]}" 2>/dev/null
  return 0
}

cleanup() {
  local p running=()
  for p in "${LIVE[@]}"; do kill -0 "$p" 2>/dev/null && running+=("$p"); done
  [ "${#running[@]}" = 0 ] && return
  echo "stopping unfinished groups: ${running[*]}"
  kill_trees TERM "${running[@]}" # the launchers and torchrun stop their ranks on SIGTERM
  sleep 5
  kill_trees KILL "${running[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Where a hung group's threads sit, for the report: per process, its threads' states.
hang_report() {
  local p d
  for p in $(tree "$1"); do
    echo "  pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"
    for d in /proc/"$p"/task/*; do
      echo "$(cat "$d/comm" 2>/dev/null) $(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f1) $(cat "$d/wchan" 2>/dev/null)"
    done | sort | uniq -c | head -12 | sed 's/^/    /'
  done
}

# Waits for the PIDs for at most $1 seconds, and at most GRACE more once one has failed (the
# other group then usually sits in the rendezvous or a collective until its own, longer
# timeout). One still running then is a hang: its threads go to the log, its tree is killed
# and its code is 124. Exit codes in RCS, in the PIDs' order.
wait_groups() {
  local deadline=$((SECONDS + $1)) i left
  shift
  local pids=("$@") st=()
  for i in "${!pids[@]}"; do st[i]=run; done
  while :; do
    left=0
    for i in "${!pids[@]}"; do
      [ "${st[i]}" = run ] || continue
      if kill -0 "${pids[i]}" 2>/dev/null; then
        left=$((left + 1))
      else
        wait "${pids[i]}"
        st[i]=$?
        if [ "${st[i]}" != 0 ] && [ "$deadline" -gt $((SECONDS + GRACE)) ]; then
          deadline=$((SECONDS + GRACE))
        fi
      fi
    done
    [ "$left" = 0 ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      for i in "${!pids[@]}"; do
        [ "${st[i]}" = run ] || continue
        echo "HANG: group $i (pid ${pids[i]}) still running at the limit; thread states:"
        hang_report "${pids[i]}"
        kill_trees KILL "${pids[i]}"
        wait "${pids[i]}" 2>/dev/null
        st[i]=124
      done
      break
    fi
    sleep 0.5
  done
  RCS=("${st[@]}")
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

machine=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c |
  awk '{$1=$1" x"; print}' | paste -sd,)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
command="bash bench/gpu_two_nodes.sh $*"
# d: $OUT/two_nodes.{json,md} from whatever the runs have left so far. Also after every run, so
# a call the device tool ends at its limit still returns the figures measured until then.
summarize() {
  python3 bench/two_nodes_summary.py "$R" "$OUT" --gpus "$gpus" --batches "$batches" \
    --precisions "$precisions" --images "$IMAGES" --machine "$machine" --commit "$commit" \
    --command "$command" --sim-hostid "$SIM_HOSTID"
}

EXTRA_ENV=() # variables for the next run_groups only (NCCL_DEBUG)

# run_groups NAME NODES SPLIT LIMIT CMD...: NODES=2 starts CMD twice at once, as node 0 and
# node 1 (@NODE@ and @PORT@ in CMD filled in; a fresh port per run), each with its own
# NCCL_HOSTID (SIM_HOSTID=1) and, when SPLIT=1, its half of the GPUs; NODES=1 starts it once
# on all N (SPLIT=1). Output in $R/NAME.node<R>.{out,err}, codes in $R/NAME.rc, the exact
# commands in $R/NAME.cmd.
run_groups() {
  local name=$1 nodes=$2 split=$3 limit=$4 port r a args envs pids=()
  shift 4
  port=$(free_port) || port=$((20000 + RANDOM % 20000))
  rm -f "$R/$name".*
  for ((r = 0; r < nodes; r++)); do
    args=()
    for a in "$@"; do
      a=${a//@NODE@/$r}
      args+=("${a//@PORT@/$port}")
    done
    envs=("${EXTRA_ENV[@]}")
    if [ "$nodes" = 2 ]; then
      [ "$SIM_HOSTID" = 1 ] && envs+=("NCCL_HOSTID=octet-sim-node$r")
      [ "$split" = 1 ] && envs+=("CUDA_VISIBLE_DEVICES=${HALF[r]}")
    elif [ "$split" = 1 ]; then
      envs+=("CUDA_VISIBLE_DEVICES=$ALL")
    fi
    printf '%q ' env "${envs[@]}" "${args[@]}" >>"$R/$name.cmd"
    echo >>"$R/$name.cmd"
    env "${envs[@]}" "${args[@]}" >"$R/$name.node$r.out" 2>"$R/$name.node$r.err" &
    pids+=("$!")
    LIVE+=("$!")
  done
  echo "-- $name: $nodes group(s), port $port"
  wait_groups "$limit" "${pids[@]}"
  LIVE=()
  echo "${RCS[*]}" >"$R/$name.rc"
  echo "   exit ${RCS[*]}"
  for ((r = 0; r < nodes; r++)); do
    [ "${RCS[r]}" = 0 ] || tail -n 3 "$R/$name.node$r.err" | sed "s/^/   node $r: /"
  done
  summarize >/dev/null 2>&1
}

# --- the runs -------------------------------------------------------------------------------
two=(--nnodes 2 --node-rank @NODE@ --gpus "$half" --master-addr 127.0.0.1 --master-port @PORT@)
train=(train --model resnet18 --data "synthetic:$IMAGES:0" --device cuda --json --epochs 2
  --schedule constant --no-augment)

if want octet-allreduce; then
  echo "== octet bench allreduce, two groups of $half (NCCL_DEBUG=INFO) and one of $gpus"
  rm -rf "$R/nccl_octet2" && mkdir -p "$R/nccl_octet2"
  EXTRA_ENV=(NCCL_DEBUG=INFO "NCCL_DEBUG_FILE=$R/nccl_octet2/%h.%p.log")
  run_groups allreduce_octet2 2 1 "$RUN_LIMIT" "$BIN" launch "${two[@]}" -- \
    bench allreduce --json --out "$R/allreduce_octet2.json"
  EXTRA_ENV=()
  echo "NCCL's network transport (NET/ lines of the ranks' NCCL_DEBUG=INFO logs):"
  grep -h -e 'NET/' -e 'Using network' "$R"/nccl_octet2/* 2>/dev/null | sed 's/.*NCCL INFO //' |
    grep -v -e '^Channel' -e 'via NET' | sort | uniq -c | head -20
  echo "channels by transport: $(grep -ho 'via [A-Za-z0-9/]*' "$R"/nccl_octet2/* 2>/dev/null |
    cut -d/ -f1-2 | sort | uniq -c | paste -sd' ')"
  run_groups allreduce_octet1 1 1 "$RUN_LIMIT" "$BIN" launch --gpus "$gpus" -- \
    bench allreduce --json --out "$R/allreduce_octet1.json"
fi

for b in ${batches//,/ }; do
  for p in ${precisions//,/ }; do
    if want octet-train; then
      echo "== octet train, two groups of $half, batch $b per GPU, $p"
      run_groups "octet2_b${b}_$p" 2 1 "$RUN_LIMIT" "$BIN" launch "${two[@]}" -- \
        "${train[@]}" --batch-size "$b" --precision "$p" --out "$R/ckpt/octet2_b${b}_${p}_node@NODE@"
    fi
    if want octet-serial; then
      echo "== octet train --no-overlap, two groups of $half, batch $b per GPU, $p"
      run_groups "octet2s_b${b}_$p" 2 1 "$RUN_LIMIT" "$BIN" launch "${two[@]}" -- \
        "${train[@]}" --batch-size "$b" --precision "$p" --no-overlap --out "$R/ckpt/octet2s_b${b}_${p}_node@NODE@"
    fi
    if want octet-compress; then
      echo "== octet train --grad-compress bf16, two groups of $half, batch $b per GPU, $p"
      run_groups "octet2c_b${b}_$p" 2 1 "$RUN_LIMIT" "$BIN" launch "${two[@]}" -- \
        "${train[@]}" --batch-size "$b" --precision "$p" --grad-compress bf16 --out "$R/ckpt/octet2c_b${b}_${p}_node@NODE@"
    fi
    if want octet-one; then
      echo "== octet train, one group of $gpus, batch $b per GPU, $p"
      run_groups "octet1_b${b}_$p" 1 1 "$RUN_LIMIT" "$BIN" launch --gpus "$gpus" -- \
        "${train[@]}" --batch-size "$b" --precision "$p" --out "$R/ckpt/octet1_b${b}_$p"
    fi
    rm -f "$R"/ckpt/*/last.safetensors # 90 MB each, not needed after the run
  done
done

if want peers || want peers-compress; then
  configs=() n=0
  for b in ${batches//,/ }; do
    for p in ${precisions//,/ }; do
      configs+=("resnet18:$b:$p")
      n=$((n + 1))
    done
  done
  quick=()
  [ "$IMAGES" = 10000 ] && quick=(--quick)
  [ "$IMAGES" = 10000 ] || [ "$IMAGES" = 50000 ] ||
    echo "note: the peer runs 50,000 images (it knows only that and --quick's 10,000); no ratios"
  peer=("$C/peer_torch.py" --ddp "${quick[@]}" --configs "$(join "${configs[@]}")")
  tr2=(torchrun --nnodes 2 --node_rank @NODE@ --nproc_per_node "$half" --master_addr 127.0.0.1
    --master_port @PORT@)
  tr1=(torchrun --standalone --nproc_per_node "$gpus")
  # peer_torch.py sets the device of its GLOBAL rank, so the GPUs stay unsplit (SPLIT=0): global
  # rank r uses GPU r in both groups, the same GPUs octet's halves give its ranks.
fi
if want peers-compress; then
  echo "== PyTorch DDP with bf16_compress_hook, two torchrun groups of $half: $(join "${configs[@]}")"
  rm -rf "$R/ddp2c" && mkdir -p "$R/ddp2c"
  run_groups ddp2c 2 0 $((RUN_LIMIT * n)) "${tr2[@]}" bench/peer_ddp_compress.py "${peer[@]}" --out "$R/ddp2c"
fi
if want peers; then
  echo "== PyTorch DDP, two torchrun groups of $half and one of $gpus: $(join "${configs[@]}")"
  # A train-only round keeps the all-reduce results in ddp2/ (the peer rewrites its file).
  [ "${PEERS_TRAIN_ONLY:-0}" = 1 ] || rm -rf "$R/ddp2" "$R/ddp1"
  mkdir -p "$R/ddp2" "$R/ddp1"
  run_groups ddp2 2 0 $((RUN_LIMIT * n)) "${tr2[@]}" "${peer[@]}" --out "$R/ddp2"
fi
# The standalone group and the all-reduce benches change with neither engine's training:
# PEERS_TRAIN_ONLY=1 leaves them out of repeated rounds.
if want peers && [ "${PEERS_TRAIN_ONLY:-0}" != 1 ]; then
  run_groups ddp1 1 0 $((RUN_LIMIT * n)) "${tr1[@]}" "${peer[@]}" --out "$R/ddp1"
  echo "== PyTorch all-reduce, two torchrun groups (NCCL_DEBUG=INFO) and one"
  rm -rf "$R/nccl_ddp2" && mkdir -p "$R/nccl_ddp2"
  EXTRA_ENV=(NCCL_DEBUG=INFO "NCCL_DEBUG_FILE=$R/nccl_ddp2/%h.%p.log" "OUT=$R/ddp2")
  run_groups allreduce_ddp2 2 0 "$RUN_LIMIT" "${tr2[@]}" "$C/peer_allreduce.py"
  EXTRA_ENV=("OUT=$R/ddp1")
  run_groups allreduce_ddp1 1 0 "$RUN_LIMIT" "${tr1[@]}" "$C/peer_allreduce.py"
  EXTRA_ENV=()
fi

# --- d. the summary, from whatever the runs left -------------------------------------------
summarize
tar czf "$OUT/two_nodes_runs.tar.gz" --exclude='*.safetensors' -C "$(dirname "$R")" two_nodes
