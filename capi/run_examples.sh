#!/usr/bin/env bash
# Builds and runs the C API's examples on the models of bench/mcu.sh (runtime/examples/
# mcu_inputs.rs, the one generator of models, images and expected logits; by default LeNets of
# 1 and 3 input channels and the embedded op set with its int8 input) and fails if any output
# byte differs from the host Rust runtime's (its scalar reference kernels):
#   - examples/host.c, built with cc against the host static library;
#   - examples/firmware/, built with arm-none-eabi-gcc against the thumbv7em-none-eabihf static
#     library and run on QEMU mps2-an386 (Cortex-M4F), prepared from the model's packed image
#     (octet_model_prepare_image), output over semihosting.
#
#   capi/run_examples.sh [WORK_DIR]
#
# Environment: MODELS (default "lenet1=lenet1 lenet3=lenet3 embedded=embedded": NAME=SPEC, as for
# bench/mcu.sh), IMAGES (default 8). Needs cc, gcc-arm-none-eabi, libnewlib-arm-none-eabi,
# qemu-system-arm and the rustup target thumbv7em-none-eabihf. Builds in $CARGO_TARGET_DIR
# (default capi/target).
set -euo pipefail
caller=$PWD
capi=$(cd "$(dirname "$0")" && pwd)
work=
[ -z "${1:-}" ] || work=$(realpath -m "$1")
cd "$capi"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$capi/target}
work=${work:-$CARGO_TARGET_DIR/examples-run}
# shellcheck source=capi/examples/firmware/mcu.sh
. examples/firmware/mcu.sh
# shellcheck source=bench/mcu_inputs.sh
. ../bench/mcu_inputs.sh
mcu_check_tools
command -v cc >/dev/null || { echo "missing cc: apt-get install gcc" >&2; exit 1; }

cargo build --release -q --lib
cargo build --release -q --lib --target thumbv7em-none-eabihf
cargo build --release -q --example make_inputs
mcu_inputs_build "$CARGO_TARGET_DIR"
make_inputs=$CARGO_TARGET_DIR/release/examples/make_inputs
host_lib=$CARGO_TARGET_DIR/release/liboctet_capi.a
mcu_lib=$CARGO_TARGET_DIR/thumbv7em-none-eabihf/release/liboctet_capi.a
mkdir -p "$work"

# What a C program linking Rust's std needs besides the library (rustc knows).
native=$(echo | rustc --crate-type staticlib --print native-static-libs -o "$work/empty.a" - 2>&1 |
  sed -n 's/.*native-static-libs: //p')
# shellcheck disable=SC2086
cc -std=c11 -O2 -Wall -Wextra -Werror -I include examples/host.c "$host_lib" $native -o "$work/host"

# same NAME EXPECTED LOG: the log's logits lines must equal the expected ones.
same() {
  if ! diff <(grep '^logits' "$3") "$2" >"$work/diff.txt"; then
    echo "FAIL: $1 logits differ from the host runtime's (< $1, > expected):" >&2
    cat "$work/diff.txt" >&2
    exit 1
  fi
  echo "ok: $1: $(grep -c '^logits' "$3") images, logits identical to the host runtime's"
}

mcu_inputs_make "$work" "${MODELS:-lenet1=lenet1 lenet3=lenet3 embedded=embedded}" "${IMAGES:-8}" "$caller"
for i in "${!MCU_MODEL_NAMES[@]}"; do
  name=${MCU_MODEL_NAMES[$i]}
  what="$name (${MCU_MODEL_SPECS[$i]})"
  d=$work/$name
  # The firmware's arena: the library's kernels on its target (checked there, exactly).
  "$make_inputs" c-inputs "$d" thumbv7em-none-eabihf
  "$work/host" "$d/model.o8" "$d/images.bin" >"$d/host.txt"
  same "host.c, $what" "$d/expected.txt" "$d/host.txt"

  mcu_cc "$d/main.o" examples/firmware/main.c -I include -I "$d"
  mcu_cc "$d/assets.o" examples/firmware/assets.S -DMODEL_FILE="$d/model.o8" \
    -DIMAGE_FILE="$d/model.o8pk" -DIMAGES_FILE="$d/images.bin"
  mcu_link "$d/firmware.elf" "$d/main.o" "$d/assets.o" "$mcu_lib"
  if ! mcu_run "$d/firmware.elf" >"$d/firmware.txt"; then
    echo "FAIL: the firmware for $what did not finish:" >&2
    cat "$d/firmware.txt" >&2
    exit 1
  fi
  same "firmware (Cortex-M4F, QEMU mps2-an386), $what" "$d/expected.txt" "$d/firmware.txt"
  # Instructions = ticks x (calibration instructions / calibration ticks).
  awk '/^calibration/ { r = $2 / $3 } /^ticks run/ { t += $4; n++ } /^stack/ { s = $2 }
    END { printf "    %.0f instructions per image (%.2f per tick), stack %d bytes\n", t / n * r, r, s }' \
    "$d/firmware.txt"
  echo "    size: $(mcu_sizes "$d/firmware.elf")"
done

# The error path, on both: a truncated model is refused with its message and a failing status.
d=$work/${MCU_MODEL_NAMES[0]}
bad=$work/truncated
mkdir -p "$bad"
head -c -1 "$d/model.o8" >"$bad/model.o8"
cp "$d/model_info.h" "$bad/"
want="the model is shorter than its header declares"
if "$work/host" "$bad/model.o8" "$d/images.bin" >/dev/null 2>"$bad/host.txt" ||
  ! grep -q "$want" "$bad/host.txt"; then
  echo "FAIL: host.c did not refuse a truncated model with \"$want\":" >&2
  cat "$bad/host.txt" >&2
  exit 1
fi
mcu_cc "$bad/main.o" examples/firmware/main.c -I include -I "$bad"
mcu_cc "$bad/assets.o" examples/firmware/assets.S -DMODEL_FILE="$bad/model.o8" \
  -DIMAGE_FILE="$d/model.o8pk" -DIMAGES_FILE="$d/images.bin"
mcu_link "$bad/firmware.elf" "$bad/main.o" "$bad/assets.o" "$mcu_lib"
if mcu_run "$bad/firmware.elf" >"$bad/firmware.txt" || ! grep -q "$want" "$bad/firmware.txt"; then
  echo "FAIL: the firmware did not refuse a truncated model with \"$want\":" >&2
  cat "$bad/firmware.txt" >&2
  exit 1
fi
echo "ok: a truncated model is refused on the host and on the firmware: $want"
