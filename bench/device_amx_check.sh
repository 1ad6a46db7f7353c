#!/usr/bin/env bash
# One short call on the GPU host's AMX Xeon (the `run` device, no toolchain): the AMX suites and
# the grouped MLPerf Tiny test, the ResNet-18 and LeNet rows of bench/device_cpu_infer.sh's
# rounds (the peers, then octet's AMX and AVX-512 VNNI sets; then ResNet-18 again, both
# engines), anomaly detection against TFLite, and per-op profiles (split_latency; ResNet-18 one
# image at a time; anomaly detection in groups). For a device budget too short for the full
# rounds and passes. Prebuilt binaries in .carry/bins.tgz (bin/: rt_lib, t_mlperf_tiny, infer,
# mlperf_tiny, rt_perf = the runtime's tests/perf.rs; stripped), peers in .carry/bin/peers
# (ort_bench.py, the LeNet files, resnet18_int8_b64.tflite), models in .carry/imported
# (bench/imported_models.sh), wheels in .whl. Results under $OUT: merge the criterion*.tgz and
# peer JSON of each call with bench/merge_cpu.py (and bench/merge_mlperf_cpu.py for
# criterion_ad.tgz, tfl_ad.json). Usage: bash bench/device_amx_check.sh
set -u
D=$OUT
grep -q amx_int8 /proc/cpuinfo || { echo "NO AMX here:"; grep -m1 "model name" /proc/cpuinfo; exit 3; }
. bench/device_lib.sh
device_setup
tar xzf .carry/bins.tgz -C .carry
B=.carry/bin; PEER=$B/peers
mkdir -p /tmp/ad; cp tests/data/mlperf_tiny/ad01_int8.tflite /tmp/ad/
C="--warm-up-time 0.5 --measurement-time 1.5 --sample-size 10"
echo "== rt_lib amx"; $B/rt_lib amx:: 2>&1 | grep -E "test result|FAILED|panicked|SKIP" | sort | uniq -c
echo "== t_mlperf_tiny"; $B/t_mlperf_tiny batches_in_groups 2>&1 | grep -E "test result|FAILED|panicked" | head -5
# Round 1: the peers, then every int8 row of the AMX and AVX-512 sets.
taskset -c 2,3 python3 "$PEER/ort_bench.py" --models lenet --json "$D/ort_lenet1.json" 2>&1 | grep -v INFO
tflite_resnet18_rows "$PEER" "$D/tfl_resnet18_1.json"
rm -rf target/criterion
taskset -c 2,3 $B/infer --bench '^(resnet18|lenet)/int8-a(mx|vx512)' $C 2>&1 | show | grep resnet18/
tar czf "$D/criterion1.tgz" target/criterion
# Anomaly detection, both engines.
taskset -c 2,3 python3 bench/tflite_mlperf_tiny.py --dir /tmp/ad --threads 1 2 --seconds 2 --repeats 1 --json "$D/tfl_ad.json" 2>&1 | grep -v INFO
rm -rf target/criterion
taskset -c 2,3 $B/mlperf_tiny --bench "ad01_int8/int8-amx/" $C 2>&1 | show
tar czf "$D/criterion_ad.tgz" target/criterion
# Round 2: ResNet-18 alone.
tflite_resnet18_rows "$PEER" "$D/tfl_resnet18_2.json"
rm -rf target/criterion
taskset -c 2,3 $B/infer --bench 'resnet18/int8-amx/' $C 2>&1 | show
tar czf "$D/criterion2.tgz" target/criterion
( KERNELS=amx taskset -c 2,3 $B/rt_perf --ignored --nocapture split_latency
  KERNELS=amx ONE_AREA=1 REPS=10 taskset -c 2 $B/rt_perf --ignored --nocapture profile_resnet18_ops
  KERNELS=amx OCTET_MODEL=.carry/imported/ad01_int8.o8 REPS=100 taskset -c 2 $B/rt_perf --ignored --nocapture profile_resnet18_ops
) > "$D/prof.log" 2>&1
grep -E "kernels|total|split|run, 1" "$D/prof.log"
