#!/usr/bin/env bash
# bench/cpu_infer.sh's int8 figures on the GPU host's CPU (the `run` device: no toolchain, the
# tree's copy capped at 64 MiB) from a prebuilt infer bench, the peers in the same call:
# ONNX Runtime and TFLite for LeNet (ort_bench.py), TFLite for ResNet-18
# (bench/tflite_resnet18.py, from the batch-64 file alone). CARRY holds `infer` (`cargo bench
# --bench infer --no-run`, stripped) and peers/ (ort_bench.py, the LeNet files,
# resnet18_int8_b64.tflite); the ai-edge-litert wheels lie in .whl. Modes:
#   rounds  two rounds of: the LeNet peers, the ResNet-18 peer, the whole infer bench;
#   fine    three rounds alternating the engines figure by figure (ResNet-18, batch 64 and 1,
#           1 and 2 threads): that host's speed drifts over tens of seconds.
# Results under $OUT (criterion's estimates as one tgz per mode, the peers' rows as JSON: the
# device returns few files); merge every call's
# with bench/merge_cpu.py (each figure its best run).
# Usage: CARRY=.carry/x bash bench/device_cpu_infer.sh rounds|fine
set -u
D=$OUT
PEER=$CARRY/peers
. bench/device_lib.sh
device_setup
case "${1:-}" in
  rounds)
    for r in 1 2; do
      taskset -c 2,3 python3 "$PEER/ort_bench.py" --models lenet --json "$D/ort_lenet$r.json" 2>&1 | grep -v INFO
      tflite_resnet18_rows "$PEER" "$D/tfl_resnet18_$r.json"
      rm -rf target/criterion
      taskset -c 2,3 "$CARRY/infer" --bench 'int8-a(mx|vx512)' --warm-up-time 0.5 --measurement-time 1.5 --sample-size 10 2>&1 | show | grep resnet
      tar czf "$D/criterion$r.tgz" target/criterion
    done
    ;;
  fine)
    rm -rf target/fine
    for r in 1 2 3; do for b in 64 1; do for t in 1 2; do
      taskset -c 2,3 python3 bench/tflite_resnet18.py "$PEER" $t $b "$D/tfl_fine.json" 2>&1 | grep -v INFO
      rm -rf target/criterion
      taskset -c 2,3 "$CARRY/infer" --bench "resnet18/int8-amx/threads$t/$b\$" --warm-up-time 0.3 --measurement-time 1.5 --sample-size 10 2>&1 | show
      mkdir -p "target/fine/$r$b$t" && cp -r target/criterion "target/fine/$r$b$t/"
    done; done; done
    tar czf "$D/criterion_fine.tgz" -C target fine
    ;;
  *) echo "usage: CARRY=DIR bash bench/device_cpu_infer.sh rounds|fine" >&2; exit 2 ;;
esac
