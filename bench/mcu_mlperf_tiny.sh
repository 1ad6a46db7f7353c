#!/usr/bin/env bash
# The MLPerf Tiny reference models on a Cortex-M4F, octet against stock TensorFlow Lite Micro
# with its CMSIS-NN kernels, in the same QEMU (mps2-an386, -icount shift=0: one instruction per
# ns of virtual time), the same .tflite files, input records and instruction counting:
#   - octet: `octet import` of each .tflite, then bench/mcu.sh (firmware/, Rust, the
#     cortex-m-dsp kernels; instructions per inference and per op, flash, RAM);
#   - the peer: TFLM at the commit bench/tflm/prepare_src.sh pins, built with its own Makefile
#     (TARGET=cortex_m_generic TARGET_ARCH=cortex-m4+fp OPTIMIZED_KERNEL_DIR=cmsis_nn
#     BUILD_TYPE=release: -O2 kernels and CMSIS-NN, -Os core, arm-none-eabi-gcc; per op, the
#     release_with_logs build, which keeps the error strings TFLM needs to call a profiler),
#     linked with
#     bench/tflm_mcu/runner.cc and the board code octet's C firmware uses
#     (capi/examples/firmware: SysTick in instructions, painted stack); per op through TFLM's
#     profiler interface on the same clock.
# Both round as TFLite does by default (double rounding); every output byte of the peer must
# equal octet's (the host runtime's, which octet's firmware matches).
#
#   bench/mcu_mlperf_tiny.sh TFLM_SRC_DIR [OUT.json]
#
# TFLM_SRC_DIR: a tree made by `CMSIS=1 bench/tflm/prepare_src.sh MIRROR_DIR TFLM_SRC_DIR` (the
# `fetch` tool's mirrors of tensorflow/tflite-micro, its third-party code, ARM-software/CMSIS_6,
# Cortex_DFP and CMSIS-NN); its library is built there (gen/, about 15 CPU-minutes once).
# Nothing of TFLM enters this repository. OUT.json (or $OUT; default
# bench/results/mcu_mlperf_tiny.json) is written through a temporary file. Environment: MODELS
# (default the four MLPerf Tiny models in tests/data/mlperf_tiny, ic kws ad vww: NAME=FILE.tflite
# pairs), IMAGES (default 4 random input records per model), JOBS (default 2), CARGO_TARGET_DIR.
# Needs what bench/mcu.sh and capi/examples/firmware/mcu.sh need (gcc-arm-none-eabi,
# libnewlib-arm-none-eabi, libstdc++-arm-none-eabi-newlib, qemu-system-arm), make and python3
# with numpy and Pillow (TFLM's Makefile converts its examples' data when it parses).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi
[ -d "$1/tensorflow/lite/micro" ] ||
  { echo "bench/mcu_mlperf_tiny.sh: $1 is not a TFLM tree (no tensorflow/lite/micro)" >&2; exit 1; }
tflm=$(cd "$1" && pwd)
dl=$tflm/tensorflow/lite/micro/tools/make/downloads
[ -d "$dl/cmsis_nn/Include" ] && [ -d "$dl/cmsis/Cortex_DFP" ] ||
  { echo "bench/mcu_mlperf_tiny.sh: $tflm lacks CMSIS and CMSIS-NN: lay it out with CMSIS=1 bench/tflm/prepare_src.sh" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${2:-${OUT:-$repo/bench/results/mcu_mlperf_tiny.json}}")
[ -d "$(dirname "$out")" ] || { echo "bench/mcu_mlperf_tiny.sh: $(dirname "$out"): no such directory" >&2; exit 1; }
d=tests/data/mlperf_tiny
models=${MODELS:-ic=$d/pretrainedResnet_quant.tflite kws=$d/kws_ref_model.tflite ad=$d/ad01_int8.tflite vww=$d/vww_96_int8.tflite}
images=${IMAGES:-4}
jobs=${JOBS:-2}
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
work=$target/mcu_mlperf_tiny
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=capi/examples/firmware/mcu.sh
. capi/examples/firmware/mcu.sh
mcu_check_tools
command -v arm-none-eabi-g++ >/dev/null ||
  { echo "arm-none-eabi-g++ missing: apt-get install gcc-arm-none-eabi libstdc++-arm-none-eabi-newlib" >&2; exit 1; }

# 1. The peer's libraries: TFLM with CMSIS-NN for the Cortex-M4F, the release build (the
# whole-inference counts, flash and RAM) and the same with its error strings, which TFLM needs
# to call a profiler (the per-op counts); incremental after the first.
make_tflm=(make -s -C "$tflm" -f tensorflow/lite/micro/tools/make/Makefile TARGET=cortex_m_generic
  TARGET_ARCH=cortex-m4+fp OPTIMIZED_KERNEL_DIR=cmsis_nn
  TARGET_TOOLCHAIN_ROOT="$(dirname "$(command -v arm-none-eabi-gcc)")/" TARGET_TOOLCHAIN_PREFIX=arm-none-eabi-)
declare -A lib flags incs
for bt in release release_with_logs; do
  echo "building TensorFlow Lite Micro + CMSIS-NN ($bt) in $tflm (JOBS=$jobs)" >&2
  "${make_tflm[@]}" BUILD_TYPE=$bt -j"$jobs" microlite >"$work/tflm_build_$bt.log" 2>&1 ||
    { tail -20 "$work/tflm_build_$bt.log" >&2; echo "the TFLM build failed ($work/tflm_build_$bt.log)" >&2; exit 1; }
  lib[$bt]=$tflm/gen/cortex_m_generic_cortex-m4+fp_${bt}_cmsis_nn_gcc/lib/libtensorflow-microlite.a
  # Its compile flags and include paths, for the runner (as the Makefile sets them: its
  # database, printed for a target that does not exist).
  "${make_tflm[@]}" BUILD_TYPE=$bt -pn no_such_target >"$work/tflm_make_db_$bt.txt" 2>/dev/null || true
  flags[$bt]=$(sed -n 's/^CXXFLAGS := //p' "$work/tflm_make_db_$bt.txt" | head -1)
  incs[$bt]=$(sed -n 's/^INCLUDES := //p' "$work/tflm_make_db_$bt.txt" | head -1)
  [ -f "${lib[$bt]}" ] && [ -n "${flags[$bt]}" ] && [ -n "${incs[$bt]}" ] ||
    { echo "could not find TFLM's $bt library, CXXFLAGS or INCLUDES" >&2; exit 1; }
done

# 2. octet: each .tflite imported, then bench/mcu.sh on the .o8 files (its inputs and expected
# outputs are the records both firmwares run).
cargo build --release -q --bin octet
specs=
for m in $models; do
  name=${m%%=*} file=${m#*=}
  [ -f "$file" ] || { echo "MODELS: $file: no such file" >&2; exit 1; }
  "$target/release/octet" import "$file" -o "$work/$name.o8" >"$work/$name.import.txt"
  specs+="$name=$work/$name.o8 "
done
MODELS=$specs IMAGES=$images TARGETS=cortex-m4f KERNELS=auto QEMU_TIMEOUT=900 \
  OUT="$work/octet.json" bash bench/mcu.sh
mcu_work=$target/mcu

# 3. The peer on each model, the same input records.
for m in $models; do
  name=${m%%=*} file=$(realpath "${m#*=}")
  dir=$work/$name
  mkdir -p "$dir"
  [ -f "$mcu_work/$name/expected.bin" ] || { echo "bench/mcu.sh left no expected.bin for $name" >&2; exit 1; }
  mcu_cc "$dir/assets.o" capi/examples/firmware/assets.S -DMODEL_FILE="$file" \
    -DIMAGES_FILE="$mcu_work/$name/images.bin" -DEXPECTED_FILE="$mcu_work/$name/expected.bin"
  for bt in release release_with_logs; do
    # The Makefile's flags as its shell would read them (quoted macro values included).
    (cd "$tflm" && eval "arm-none-eabi-g++ ${flags[$bt]} -O2 ${incs[$bt]}" \
      -I "'$repo/capi/examples/firmware'" -c "'$repo/bench/tflm_mcu/runner.cc'" -o "'$dir/runner_$bt.o'")
    mcu_link "$dir/peer_$bt.elf" "$dir/runner_$bt.o" "$dir/assets.o" "${lib[$bt]}" -lsupc++ -lm
    mcu_run "$dir/peer_$bt.elf" >"$dir/peer_$bt.txt" ||
      { cat "$dir/peer_$bt.txt" >&2; echo "the peer ($bt) failed on $name" >&2; exit 1; }
  done
  mcu_sizes "$dir/peer_release.elf" >"$dir/peer_size.json"
done

# 4. One JSON: both engines per model, the ratios and the issue's targets.
tmp=$(mktemp "$(dirname "$out")/.mcu_mlperf_tiny.XXXXXX")
trap 'rm -f "$tmp"' EXIT
python3 bench/mcu_mlperf_tiny.py "$work" "$tmp" \
  --command "IMAGES=$images bench/mcu_mlperf_tiny.sh $*" \
  --commit "$(git describe --always --dirty --abbrev=12)" \
  --tflm "$(cat "$tflm/TFLM_COMMIT" 2>/dev/null || echo unknown)" \
  --flags "${flags[release]} -O2 (kernels, CMSIS-NN; core -Os), linked with $(arm-none-eabi-gcc --version | head -1)" \
  --qemu "$(qemu-system-arm --version | head -1)" \
  --models "$models"
mv "$tmp" "$out"
trap - EXIT
python3 - "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, m in d["models"].items():
    o, t = m["octet"], m["tflm_cmsis_nn"]
    print(f"{name:4} octet {o['instructions']:>10,} insn  TFLM+CMSIS-NN {t['instructions']:>10,} insn  "
          f"ratio {m['octet_over_tflm']:.3f}  best published {m['best_published']['cycles_at_120_mhz']:>10,}  "
          f"identical {t['identical_to_octet']}")
PY
