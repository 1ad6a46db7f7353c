#!/usr/bin/env bash
# Builds TensorFlow Lite Micro's reference kernels for the x86-64 Linux host
# twice, each linked with bench/tflm/runner.cc:
#   OUT_DIR/default/runner          TFLM's default requantization: gemmlowp's
#                                   double rounding (SaturatingRoundingDoubling-
#                                   HighMul, then RoundingDivideByPOT)
#   OUT_DIR/single_rounding/runner  built with -DTFLITE_SINGLE_ROUNDING=1:
#                                   (acc*M0 + 2^(n-1)) >> n, octet's formula
# so that every difference between octet and the pip TFLM / LiteRT packages
# can be shown to come from the rounding variant and nothing else.
#
# Usage: bench/tflm/build.sh TFLM_SRC_DIR OUT_DIR
#   TFLM_SRC_DIR: a TFLM tree with its downloads in place, as
#   bench/tflm/prepare_src.sh lays it out (TFLM commit
#   90b983c2b3f1480642e040bbd2ddb37b998f3424). Nothing is copied from it into
#   the repository; objects go to OUT_DIR.
# Needs g++, make, python3 with numpy and Pillow (TFLM's Makefile converts its
# examples' images while it parses). JOBS (default 2) sets make's -j.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 TFLM_SRC_DIR OUT_DIR" >&2
  exit 2
fi
src=$(realpath "$1")
out=$(realpath -m "$2")
runner_cc=$(realpath "$(dirname "$0")/runner.cc")
jobs=${JOBS:-2}
makefile=tensorflow/lite/micro/tools/make/Makefile
if [ ! -f "$src/$makefile" ]; then
  echo "error: $src has no $makefile; is it a TFLM checkout?" >&2
  exit 1
fi
for dep in flatbuffers gemmlowp ruy kissfft pigweed; do
  if [ ! -d "$src/tensorflow/lite/micro/tools/make/downloads/$dep" ]; then
    echo "error: $src lacks downloads/$dep (this machine cannot download it):" \
      "lay the tree out with bench/tflm/prepare_src.sh" >&2
    exit 1
  fi
done
commit=$(cat "$src/TFLM_COMMIT" 2>/dev/null || git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)

# tflm_make GENDIR DEFINES ARGS...: the TFLM Makefile, objects under GENDIR.
tflm_make() {
  local gendir=$1 defines=$2
  shift 2
  (cd "$src" && make -f "$makefile" GENDIR="$gendir" \
    ADDITIONAL_DEFINES="$defines" "$@")
}
# make_var GENDIR DEFINES NAME: the value the Makefile gives NAME.
make_var() {
  tflm_make "$1" "$2" "print-$3" 2>/dev/null | sed -n "s/^$3=//p"
}

# The Makefile's own defines (-DKERNELS_OPTIMIZED_FOR_SPEED...), read rather
# than copied, so that the two variants differ by exactly one define.
base_defines=$(cd "$src" && make -f "$makefile" print-ADDITIONAL_DEFINES 2>/dev/null |
  sed -n 's/^ADDITIONAL_DEFINES=//p')

mkdir -p "$out"
start=$(date +%s)
for variant in default single_rounding; do
  defines=$base_defines
  [ "$variant" = single_rounding ] && defines="$defines -DTFLITE_SINGLE_ROUNDING=1"
  dir="$out/$variant"
  gendir="$dir/gen/"
  mkdir -p "$dir"
  echo "building $variant (make -j$jobs, log in $dir/build.log)"
  t0=$(date +%s)
  # The TFLM Makefile does not track flags: a GENDIR built with other defines
  # would be reused silently, so each variant's defines are stamped.
  if [ -f "$dir/defines" ] && [ "$(cat "$dir/defines")" != "$defines" ]; then
    echo "error: $dir was built with '$(cat "$dir/defines")', not '$defines':" \
      "remove $dir and rerun" >&2
    exit 1
  fi
  echo "$defines" >"$dir/defines"
  if ! tflm_make "$gendir" "$defines" -j"$jobs" V=1 microlite >"$dir/build.log" 2>&1; then
    tail -20 "$dir/build.log" >&2
    echo "error: the TFLM build of $variant failed; see $dir/build.log" >&2
    exit 1
  fi
  # Evidence (make V=1 logs each compile line of this run) that all of the
  # single-rounding variant's compile lines carry the define, none of default's.
  n_compiled=$(grep -c -- ' -c ' "$dir/build.log" || true)
  n_single=$(grep -c -- '-DTFLITE_SINGLE_ROUNDING=1 .* -c ' "$dir/build.log" || true)
  want=0
  [ "$variant" = single_rounding ] && want=$n_compiled
  if [ "$n_single" -ne "$want" ]; then
    echo "error: $n_single of $n_compiled compile lines in $dir/build.log carry" \
      "-DTFLITE_SINGLE_ROUNDING=1; $variant needs $want" >&2
    exit 1
  fi
  echo "  compiled $n_compiled files, $n_single with -DTFLITE_SINGLE_ROUNDING=1"
  cxxflags=$(make_var "$gendir" "$defines" CXXFLAGS)
  includes=$(make_var "$gendir" "$defines" INCLUDES)
  lib=$(make_var "$gendir" "$defines" MICROLITE_LIB_PATH)
  # shellcheck disable=SC2086  # the flags are word lists
  (cd "$src" && g++ $cxxflags -O2 $includes "$runner_cc" "$lib" -lm -o "$dir/runner.partial")
  mv "$dir/runner.partial" "$dir/runner"
  echo "  $variant: $(($(date +%s) - t0)) s -> $dir/runner"
done
{
  echo "tflm_commit=$commit"
  echo "cxx=$(g++ --version | head -1)"
  echo "base_defines=$base_defines"
  echo "last_run_seconds=$(($(date +%s) - start)) (make -j$jobs; a rerun only relinks)"
} >"$out/BUILD_INFO"
cat "$out/BUILD_INFO"
