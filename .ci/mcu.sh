#!/usr/bin/env bash
# CI: the runtime on microcontrollers. Installs QEMU, the Arm bare-metal binutils and the rustup
# targets when missing, then runs bench/mcu.sh's check: the firmware (firmware/) on a Cortex-M4F
# and a Cortex-M3 under QEMU, LeNets in both roundings and the embedded op set (int8 input),
# every output byte against the host's, then the MLPerf Tiny models imported by the host.
# Fails on any difference. Builds only the runtime, the firmware and its small dependencies (no
# candle), and the octet binary for the import where .ci/run has not imported the models.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=.ci/lib.sh
. .ci/lib.sh
missing=()
command -v qemu-system-arm >/dev/null || missing+=(qemu-system-arm)
command -v arm-none-eabi-size >/dev/null || command -v llvm-size >/dev/null ||
  missing+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
apt_install "${missing[@]}"
rustup_targets thumbv7em-none-eabihf thumbv7m-none-eabi

bash bench/mcu.sh check
# The MLPerf Tiny reference models as the host imports them (TFLite Micro's bytes): on both
# cores, every output byte the host's. bench/imported_models.sh makes them where .ci/run has not.
imported=$(realpath "${CARGO_TARGET_DIR:-target}")/imported
[ -d "$imported" ] || bash bench/imported_models.sh "$imported" 4
MODELS="ic=$imported/pretrainedResnet_quant.o8 kws=$imported/kws_ref_model.o8 \
ad=$imported/ad01_int8.o8 vww=$imported/vww_96_int8.o8" IMAGES=2 bash bench/mcu.sh check
# The firmware is outside the workspace: its format and lints, for both targets, here.
cargo fmt --manifest-path firmware/Cargo.toml -- --check
# (bench/mcu.sh starts its work folder afresh each call: the last call's inputs are there.)
inputs=$(realpath "${CARGO_TARGET_DIR:-target}")/mcu/ad
(cd firmware && for t in thumbv7em-none-eabihf thumbv7m-none-eabi; do
  OCTET_MCU_INPUTS=$inputs cargo clippy --release -q --target "$t" --all-targets -- -D warnings
done)
